{{/* Contradictory or missing values fail rendering with a message that names the key and says
what to do, before anything reaches the cluster. Rendered from validations.yaml. */}}
{{- define "sluicegate.validate" -}}
{{- $errors := list -}}
{{- $v := .Values -}}

{{- /* Redis */ -}}
{{- if $v.redis.enabled -}}
{{- if or $v.redis.external.url $v.redis.external.existingSecret -}}
{{- $errors = append $errors "redis.external.* is set while redis.enabled=true: set redis.enabled=false to use your own Redis, or remove redis.external" -}}
{{- end -}}
{{- else -}}
{{- if and (not $v.redis.external.url) (not $v.redis.external.existingSecret) -}}
{{- $errors = append $errors "redis.enabled=false needs redis.external.url or redis.external.existingSecret (a Secret holding the whole redis:// URL)" -}}
{{- end -}}
{{- if and $v.redis.external.url $v.redis.external.existingSecret -}}
{{- $errors = append $errors "redis.external.url and redis.external.existingSecret are both set: give one" -}}
{{- end -}}
{{- if and $v.redis.external.url (not (regexMatch "^(redis|rediss|redis\\+sentinel|redis\\+cluster|rediss\\+cluster)://" $v.redis.external.url)) -}}
{{- $errors = append $errors "redis.external.url must start with redis://, rediss://, redis+sentinel://, redis+cluster:// or rediss+cluster://" -}}
{{- end -}}
{{- end -}}
{{- if and $v.redis.auth.existingSecret $v.redis.auth.password -}}
{{- $errors = append $errors "redis.auth.password and redis.auth.existingSecret are both set: give one" -}}
{{- end -}}
{{- if and $v.gateway.adminPort (eq (int $v.gateway.adminPort) (int $v.gateway.port)) -}}
{{- $errors = append $errors (printf "gateway.adminPort is gateway.port (%d): give the admin plane a port of its own, or 0 to serve it on gateway.port" (int $v.gateway.port)) -}}
{{- end -}}
{{- range $name, $entrance := dict "gateway.adminIngress" $v.gateway.adminIngress "gateway.adminHttpRoute" $v.gateway.adminHttpRoute -}}
{{- if $entrance.enabled -}}
{{- if not $v.gateway.adminPort -}}
{{- $errors = append $errors (printf "%s publishes the admin plane, which needs a port of its own: set gateway.adminPort (e.g. 8081)" $name) -}}
{{- end -}}
{{- if not (or $entrance.host $entrance.hostname) -}}
{{- $errors = append $errors (printf "%s needs the admin plane's own host name (%s.%s)" $name $name (ternary "host" "hostname" (hasKey $entrance "host"))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $v.oidc.clientId (not $v.oidc.issuer) -}}
{{- $errors = append $errors "oidc.clientId is set without oidc.issuer: set the IdP's issuer" -}}
{{- end -}}
{{- if and $v.oidc.issuer (not (or $v.oidc.audience $v.oidc.clientId)) -}}
{{- $errors = append $errors "oidc.issuer needs oidc.audience (the admin API's audience) or oidc.clientId" -}}
{{- end -}}
{{- if and $v.oidc.clientId (not $v.oidc.clientSecret.existingSecret) -}}
{{- $errors = append $errors "oidc.clientId needs oidc.clientSecret.existingSecret: the console's client secret, by reference" -}}
{{- end -}}
{{- if and $v.auth.existingSecret $v.auth.adminToken -}}
{{- $errors = append $errors "auth.adminToken and auth.existingSecret are both set: give one" -}}
{{- end -}}
{{- if and $v.auth.adminToken (lt (len $v.auth.adminToken) 32) -}}
{{- $errors = append $errors (printf "auth.adminToken is %d characters: the gateway needs at least 32 (e.g. openssl rand -hex 24), or leave it empty and the chart generates one" (len $v.auth.adminToken)) -}}
{{- end -}}

{{- /* Gateway replicas, autoscaling, disruption budget, shutdown */ -}}
{{- $pdb := $v.gateway.pdb -}}
{{- $minReplicas := ternary $v.gateway.autoscaling.minReplicas $v.gateway.replicas $v.gateway.autoscaling.enabled | int -}}
{{- if and $v.gateway.autoscaling.enabled (gt (int $v.gateway.autoscaling.minReplicas) (int $v.gateway.autoscaling.maxReplicas)) -}}
{{- $errors = append $errors (printf "gateway.autoscaling.minReplicas (%v) is above gateway.autoscaling.maxReplicas (%v)" $v.gateway.autoscaling.minReplicas $v.gateway.autoscaling.maxReplicas) -}}
{{- end -}}
{{- if $pdb.enabled -}}
{{- if and (not (kindIs "invalid" $pdb.minAvailable)) (not (kindIs "invalid" $pdb.maxUnavailable)) -}}
{{- $errors = append $errors "gateway.pdb: set minAvailable or maxUnavailable, not both (set the other to null)" -}}
{{- else if and (not (kindIs "invalid" $pdb.minAvailable)) (not (kindIs "string" $pdb.minAvailable)) (ge (int $pdb.minAvailable) $minReplicas) -}}
{{- $errors = append $errors (printf "gateway.pdb.minAvailable (%v) must be below the gateway's %s (%d), or no node could ever be drained" $pdb.minAvailable (ternary "autoscaling.minReplicas" "replicas" $v.gateway.autoscaling.enabled) $minReplicas) -}}
{{- end -}}
{{- end -}}
{{- $shutdown := include "sluicegate.gatewayShutdownSeconds" . | int -}}
{{- if and (not (kindIs "invalid" $v.gateway.terminationGracePeriodSeconds)) (lt (int $v.gateway.terminationGracePeriodSeconds) $shutdown) -}}
{{- $drain := include "sluicegate.drainTimeoutSeconds" . -}}
{{- if kindIs "invalid" $v.gateway.shutdown.drainTimeoutSeconds -}}
{{- $drain = printf "%s, the longest timeouts.total of the models" $drain -}}
{{- end -}}
{{- $errors = append $errors (printf "gateway.terminationGracePeriodSeconds (%v) would cut the shutdown short: it needs at least gateway.shutdown.delaySeconds (%v) + gateway.shutdown.drainTimeoutSeconds (%s) + %s s to flush metering = %d; raise it, set a shorter drain, or leave it empty to derive it" $v.gateway.terminationGracePeriodSeconds $v.gateway.shutdown.delaySeconds $drain (include "sluicegate.gatewayFlushSeconds" .) $shutdown) -}}
{{- end -}}
{{- if hasKey $v.gateway "preStopSleepSeconds" -}}
{{- if not (kindIs "invalid" $v.gateway.preStopSleepSeconds) -}}
{{- $errors = append $errors "gateway.preStopSleepSeconds is gone: the gateway now waits by itself after SIGTERM, with /readyz failing, before it stops listening; remove it and set gateway.shutdown.delaySeconds (default 5) to the wait you need" -}}
{{- end -}}
{{- end -}}

{{- /* Gateway usage spool */ -}}
{{- $persistence := $v.gateway.spool.persistence -}}
{{- if and $persistence.existingClaim (not $persistence.enabled) -}}
{{- $errors = append $errors "gateway.spool.persistence.existingClaim is set while gateway.spool.persistence.enabled=false: set enabled=true to use it" -}}
{{- end -}}
{{- if and $persistence.enabled $persistence.existingClaim -}}
{{- $maxReplicas := ternary $v.gateway.autoscaling.maxReplicas $v.gateway.replicas $v.gateway.autoscaling.enabled | int -}}
{{- if gt $maxReplicas 1 -}}
{{- $errors = append $errors (printf "gateway.spool.persistence.existingClaim holds one spool file, but the gateway may run %d replicas (%s): each replica needs its own spool, so leave existingClaim empty to give every replica a claim of its own (volumeClaimTemplates), or run one replica" $maxReplicas (ternary "autoscaling.maxReplicas" "replicas" $v.gateway.autoscaling.enabled)) -}}
{{- end -}}
{{- end -}}
{{- if and $v.gateway.discovery.autodiscovery (not $v.serviceAccount.create) (not $v.serviceAccount.name) -}}
{{- $errors = append $errors "gateway.discovery.autodiscovery needs a ServiceAccount: set serviceAccount.create=true or serviceAccount.name" -}}
{{- end -}}

{{- /* Models */ -}}
{{- $seen := dict -}}
{{- $all := concat $v.models $v.extraModels -}}
{{- range $i, $m := $all -}}
{{- $where := ternary (printf "models[%d]" $i) (printf "extraModels[%d]" (sub $i (len $v.models))) (lt $i (len $v.models)) -}}
{{- if not $m.name -}}
{{- $errors = append $errors (printf "%s: name is required" $where) -}}
{{- else -}}
{{- range $n := prepend ($m.aliases | default list) $m.name -}}
{{- if hasKey $seen (toString $n) -}}
{{- $errors = append $errors (printf "%s: the model name %q is already used by %s (names and aliases must be unique)" $where $n (get $seen (toString $n))) -}}
{{- else -}}
{{- $_ := set $seen (toString $n) $where -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $i, $m := $all -}}
{{- $where := ternary (printf "models[%d]" $i) (printf "extraModels[%d]" (sub $i (len $v.models))) (lt $i (len $v.models)) -}}
{{- range $m.fallbacks -}}
{{- if not (hasKey $seen (toString .)) -}}
{{- $errors = append $errors (printf "%s (%s): fallback %q is not a model of this release" $where $m.name .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $slugs := dict -}}
{{- range $m := (include "sluicegate.models" . | fromJson).models -}}
{{- $where := printf "models[%d] (%s)" (int $m._index) $m.name -}}
{{- if hasKey $slugs $m._resourceName -}}
{{- $errors = append $errors (printf "%s: its object name %s is also another model's; rename one" $where $m._resourceName) -}}
{{- end -}}
{{- $_ := set $slugs $m._resourceName true -}}
{{- if eq $m.engine "vllm" -}}
{{- if not (and $m.vllm $m.vllm.model) -}}
{{- $errors = append $errors (printf "%s: engine vllm needs vllm.model (a Hugging Face id such as Qwen/Qwen2.5-7B-Instruct, or a path in the cache volume)" $where) -}}
{{- end -}}
{{- if lt (int $m.gpus) 1 -}}
{{- $errors = append $errors (printf "%s: engine vllm runs the CUDA image and needs gpus >= 1 (got %v)" $where $m.gpus) -}}
{{- end -}}
{{- if and (eq $m.cache.type "existingClaim") (not $m.cache.existingClaim) -}}
{{- $errors = append $errors (printf "%s: cache.type existingClaim needs cache.existingClaim" $where) -}}
{{- end -}}
{{- $maxReplicas := ternary (dig "maxReplicas" $v.keda.defaults.maxReplicas ($m.keda | default dict)) $m.replicas (and $m.keda $m.keda.enabled | default false) -}}
{{- if and (eq $m.cache.type "pvc") (has "ReadWriteOnce" $m.cache.accessModes) (not (has "ReadWriteMany" $m.cache.accessModes)) (gt (int $maxReplicas) 1) -}}
{{- $errors = append $errors (printf "%s: a ReadWriteOnce cache PVC cannot be shared by %v replicas on different nodes: use cache.accessModes [ReadWriteMany], or cache.type emptyDir" $where $maxReplicas) -}}
{{- end -}}
{{- else if eq $m.engine "reframr" -}}
{{- if and (eq $m.mode "runtime") (eq $m.modelVolume.type "existingClaim") (not $m.modelVolume.existingClaim) -}}
{{- $errors = append $errors (printf "%s: engine reframr (mode runtime) needs modelVolume.existingClaim: a PVC holding a checkout of the Reframr model repository (or modelVolume.type pvc, or mode test)" $where) -}}
{{- end -}}
{{- else if eq $m.engine "external" -}}
{{- $ext := $m.external | default dict -}}
{{- if eq (len (compact (list ($ext.url | default "") ($ext.service | default "")))) 1 | not -}}
{{- $errors = append $errors (printf "%s: engine external needs exactly one of external.url (a worker's base URL) or external.service (a Service of existing workers)" $where) -}}
{{- end -}}
{{- if and $m.keda $m.keda.enabled -}}
{{- $errors = append $errors (printf "%s: keda is for workers this chart runs, not engine external" $where) -}}
{{- end -}}
{{- end -}}
{{- if and $m.keda $m.keda.enabled (ne $m.engine "external") -}}
{{- $keda := mergeOverwrite (deepCopy $v.keda.defaults) (deepCopy $m.keda) -}}
{{- if not $v.keda.prometheus.serverAddress -}}
{{- $errors = append $errors (printf "%s: keda.enabled needs keda.prometheus.serverAddress (the Prometheus that scrapes the workers)" $where) -}}
{{- end -}}
{{- if gt (int $keda.minReplicas) (int $keda.maxReplicas) -}}
{{- $errors = append $errors (printf "%s: keda.minReplicas (%v) is above keda.maxReplicas (%v)" $where $keda.minReplicas $keda.maxReplicas) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* Publishing the client APIs */ -}}
{{- if and $v.gateway.httpRoute.enabled (not $v.gateway.httpRoute.parentRefs) -}}
{{- $errors = append $errors "gateway.httpRoute.enabled needs gateway.httpRoute.parentRefs: the Gateway the route attaches to, e.g. [{name: public, namespace: gateway-system}]" -}}
{{- end -}}
{{- range $i, $m := $v.models -}}
{{- if and (eq ($m.engine | toString) "reframr") (or $m.tokenize (has "native" (values ($m.protocols | default dict)))) -}}
{{- $errors = append $errors (printf "models[%d] (%s): engine reframr serves the chat contract only: leave protocols translate and tokenize false (native protocols and tokenize are for vLLM workers)" $i $m.name) -}}
{{- end -}}
{{- end -}}

{{- if $errors -}}
{{- fail (printf "\n\nsluicegate: invalid values:\n  - %s\n" (join "\n  - " $errors)) -}}
{{- end -}}
{{- end -}}
