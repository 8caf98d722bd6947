{{/* Names and labels. Kubernetes names are at most 63 characters (Service names: DNS-1035). */}}
{{- define "sluicegate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluicegate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<suffix>", shortened with a hash of the whole when it would pass 63 characters,
so two long names never collide after truncation. Call with (list $ "suffix"). */}}
{{- define "sluicegate.componentName" -}}
{{- $root := index . 0 -}}
{{- $full := printf "%s-%s" (include "sluicegate.fullname" $root) (index . 1) -}}
{{- if le (len $full) 63 -}}
{{- $full -}}
{{- else -}}
{{- printf "%s-%s" ($full | trunc 56 | trimSuffix "-") (sha256sum $full | trunc 6) -}}
{{- end -}}
{{- end -}}

{{- define "sluicegate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sluicegate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sluicegate
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "sluicegate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluicegate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluicegate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sluicegate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* repository:tag, refusing a missing or floating tag. Call with (list $ .Values.x.image). */}}
{{- define "sluicegate.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- $tag := default $root.Chart.AppVersion ($image.tag | toString) -}}
{{- if or (eq $tag "latest") (eq $tag "") -}}
{{- fail (printf "image %s: pin a version tag (got %q): `latest` changes under you" $image.repository $tag) -}}
{{- end -}}
{{- printf "%s:%s" $image.repository $tag -}}
{{- end -}}

{{/* Secrets: the chart's own Secret holds whatever the user did not bring in a Secret of theirs. */}}
{{- define "sluicegate.secretName" -}}
{{- include "sluicegate.fullname" . -}}
{{- end -}}

{{- define "sluicegate.adminSecretName" -}}
{{- default (include "sluicegate.secretName" .) .Values.auth.existingSecret -}}
{{- end -}}

{{- define "sluicegate.adminSecretKey" -}}
{{- if .Values.auth.existingSecret -}}{{ .Values.auth.adminTokenKey }}{{- else -}}admin-token{{- end -}}
{{- end -}}

{{- define "sluicegate.redisName" -}}
{{- include "sluicegate.componentName" (list . "redis") -}}
{{- end -}}

{{- define "sluicegate.redisPasswordSecretName" -}}
{{- default (include "sluicegate.secretName" .) .Values.redis.auth.existingSecret -}}
{{- end -}}

{{- define "sluicegate.redisPasswordSecretKey" -}}
{{- if .Values.redis.auth.existingSecret -}}{{ .Values.redis.auth.existingSecretPasswordKey }}{{- else -}}redis-password{{- end -}}
{{- end -}}

{{- define "sluicegate.redisUrlSecretName" -}}
{{- default (include "sluicegate.secretName" .) .Values.redis.external.existingSecret -}}
{{- end -}}

{{- define "sluicegate.redisUrlSecretKey" -}}
{{- if .Values.redis.external.existingSecret -}}{{ .Values.redis.external.existingSecretKey }}{{- else -}}redis-url{{- end -}}
{{- end -}}

{{/* Model names may hold characters no Kubernetes name allows (`org/model:tag`). A name that
already is a DNS label is kept; any other becomes a lower-case slug plus a hash of the real
name, so two names that slug alike ("Llama/3" and "llama-3") still get different objects. */}}
{{- define "sluicegate.modelSlug" -}}
{{- if and (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .) (le (len .) 40) -}}
{{- . -}}
{{- else -}}
{{- $slug := regexReplaceAll "[^a-z0-9]+" (lower .) "-" | trimAll "-" | trunc 32 | trimSuffix "-" -}}
{{- printf "%s-%s" (default "model" $slug) (sha256sum . | trunc 6) -}}
{{- end -}}
{{- end -}}

{{/* A label value is at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends; the annotation
sluicegate.io/model always carries the real name. */}}
{{- define "sluicegate.modelLabelValue" -}}
{{- if and (regexMatch "^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" .) (le (len .) 63) -}}
{{- . -}}
{{- else -}}
{{- include "sluicegate.modelSlug" . -}}
{{- end -}}
{{- end -}}

{{/* The models list with the worker defaults and the engine defaults merged under each entry,
plus what templates derive from it: {"models": [ {..., "_slug", "_resourceName", "_labelValue",
"_servedName"} ]}. Read with `include "sluicegate.models" . | fromJson`. */}}
{{- define "sluicegate.models" -}}
{{- $out := list -}}
{{- range $i, $model := .Values.models -}}
{{- $engine := $model.engine | default "" -}}
{{- $merged := deepCopy $model -}}
{{- if or (eq $engine "vllm") (eq $engine "reframr") -}}
{{- $base := mergeOverwrite (deepCopy $.Values.workers) (deepCopy (index $.Values.engines $engine)) -}}
{{- $merged = mergeOverwrite $base (deepCopy $model) -}}
{{- end -}}
{{- $name := $model.name | toString -}}
{{- $slug := include "sluicegate.modelSlug" $name -}}
{{- $_ := set $merged "_index" $i -}}
{{- $_ := set $merged "_slug" $slug -}}
{{- $_ := set $merged "_resourceName" (include "sluicegate.componentName" (list $ (printf "worker-%s" $slug))) -}}
{{- $_ := set $merged "_labelValue" (include "sluicegate.modelLabelValue" $name) -}}
{{- $_ := set $merged "_servedName" (default $name $model.upstream_model) -}}
{{- $out = append $out $merged -}}
{{- end -}}
{{- toJson (dict "models" $out) -}}
{{- end -}}

{{/* The namespaces the gateway watches (and is granted get/list/watch in), as a JSON list. */}}
{{- define "sluicegate.watchedNamespaces" -}}
{{- $ns := list -}}
{{- range .Values.models -}}
{{- if ne .engine "external" -}}
{{- $ns = append $ns $.Release.Namespace -}}
{{- else if and .external .external.service -}}
{{- $ns = append $ns (default $.Release.Namespace .external.namespace) -}}
{{- end -}}
{{- end -}}
{{- range .Values.extraModels -}}
{{- if .discovery -}}
{{- $ns = append $ns (default $.Release.Namespace (dig "kubernetes" "namespace" "" .discovery)) -}}
{{- end -}}
{{- range (.pools | default list) -}}
{{- if .discovery -}}
{{- $ns = append $ns (default $.Release.Namespace (dig "kubernetes" "namespace" "" .discovery)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if .Values.gateway.discovery.autodiscovery -}}
{{- $ns = append $ns .Release.Namespace -}}
{{- range $model, $allowed := .Values.gateway.discovery.modelNamespaces -}}
{{- $ns = concat $ns $allowed -}}
{{- end -}}
{{- end -}}
{{- $ns = concat $ns .Values.gateway.discovery.namespaces -}}
{{- toJson (uniq $ns) -}}
{{- end -}}

{{/* The model table the gateway loads (SLUICEGATE_CONFIG). */}}
{{- define "sluicegate.modelTable" -}}
{{- $entries := list -}}
{{- range (include "sluicegate.models" . | fromJson).models -}}
{{- $entry := dict "name" .name -}}
{{- if .aliases }}{{ $_ := set $entry "aliases" .aliases }}{{ end -}}
{{- if .upstream_model }}{{ $_ := set $entry "upstream_model" .upstream_model }}{{ end -}}
{{- if eq .engine "external" -}}
{{- $ext := .external | default dict -}}
{{- if $ext.url -}}
{{- $_ := set $entry "endpoints" (list (dict "url" $ext.url)) -}}
{{- else -}}
{{- $target := dict "service" $ext.service "namespace" (default $.Release.Namespace $ext.namespace) "port" (default "http" $ext.port) -}}
{{- $_ := set $entry "discovery" (dict "kubernetes" $target) -}}
{{- end -}}
{{- else -}}
{{- $target := dict "service" ._resourceName "namespace" $.Release.Namespace "port" "http" -}}
{{- $_ := set $entry "discovery" (dict "kubernetes" $target) -}}
{{- end -}}
{{- if .fallbacks }}{{ $_ := set $entry "fallbacks" .fallbacks }}{{ end -}}
{{- if .routing }}{{ $_ := set $entry "routing" .routing }}{{ end -}}
{{- if .health }}{{ $_ := set $entry "health" .health }}{{ end -}}
{{- if .timeouts }}{{ $_ := set $entry "timeouts" .timeouts }}{{ end -}}
{{- if .max_output_tokens }}{{ $_ := set $entry "max_output_tokens" .max_output_tokens }}{{ end -}}
{{- if .context_window }}{{ $_ := set $entry "context_window" .context_window }}{{ end -}}
{{- if .default_max_tokens }}{{ $_ := set $entry "default_max_tokens" .default_max_tokens }}{{ end -}}
{{- if .protocols }}{{ $_ := set $entry "protocols" .protocols }}{{ end -}}
{{- /* Booleans whose default is false: `false` written or left out reads the same. */ -}}
{{- if .tokenize }}{{ $_ := set $entry "tokenize" true }}{{ end -}}
{{- if .native_normalise }}{{ $_ := set $entry "native_normalise" true }}{{ end -}}
{{- if .hosted_tools }}{{ $_ := set $entry "hosted_tools" .hosted_tools }}{{ end -}}
{{- if .cache_isolation }}{{ $_ := set $entry "cache_isolation" .cache_isolation }}{{ end -}}
{{- if .engine_fields }}{{ $_ := set $entry "engine_fields" .engine_fields }}{{ end -}}
{{- if hasKey . "max_logprobs" }}{{ $_ := set $entry "max_logprobs" .max_logprobs }}{{ end -}}
{{- if .price }}{{ $_ := set $entry "price" .price }}{{ end -}}
{{- if .overflow }}{{ $_ := set $entry "overflow" (include "sluicegate.overflow" .overflow | fromYaml) }}{{ end -}}
{{- $entries = append $entries $entry -}}
{{- end -}}
{{- $entries = concat $entries .Values.extraModels -}}
{{- /* concat of two empty lists is nil, which toYaml writes as null, not a list. */ -}}
{{- if $entries -}}
{{- toYaml (dict "models" $entries) -}}
{{- else -}}
models: []
{{- end -}}
{{- end -}}

{{/* The longest stream any model allows (timeouts.stream_total, 3600 s by default), in whole
seconds. A stream still open when a gateway pod has drained for gateway.shutdown.drainTimeoutSeconds
is ended with an error event, so this is what a drain timeout that never cuts a stream must reach. */}}
{{- define "sluicegate.longestStream" -}}
{{- $longest := 0 -}}
{{- range (concat .Values.models .Values.extraModels) -}}
{{- $total := dig "stream_total" 3600 (.timeouts | default dict) -}}
{{- $longest = max (ceil (float64 $total) | int) $longest -}}
{{- end -}}
{{- $longest | int -}}
{{- end -}}

{{/* The path prefixes of the client APIs, the only paths the Ingress and the HTTPRoute publish:
/v1 (OpenAI chat, completions, embeddings, models; Anthropic Messages; Responses; /v1/key/info)
and /v1beta (Gemini). Never /admin (the admin API and the console) or /metrics. */}}
{{- define "sluicegate.clientApiPaths" -}}
{{- toJson (list "/v1" "/v1beta") -}}
{{- end -}}

{{/* Deployment, or StatefulSet when the usage spool is on persistent volumes. */}}
{{- define "sluicegate.gatewayKind" -}}
{{- ternary "StatefulSet" "Deployment" .Values.gateway.spool.persistence.enabled -}}
{{- end -}}

{{/* Seconds after SIGTERM that flushing metering (or writing the spool) may take once the drain is
over; Redis calls are bounded by SLUICEGATE_REDIS_TIMEOUT (2 s). */}}
{{- define "sluicegate.gatewayFlushSeconds" -}}10{{- end -}}

{{/* The longest non-streaming answer any model allows (timeouts.total, 600 s when a model leaves
it out, and when there is no model), in whole seconds. */}}
{{- define "sluicegate.longestAnswer" -}}
{{- $all := concat .Values.models .Values.extraModels -}}
{{- $longest := ternary 0 600 (gt (len $all) 0) -}}
{{- range $all -}}
{{- $total := dig "total" 600 (.timeouts | default dict) -}}
{{- $longest = max (ceil (float64 $total) | int) $longest -}}
{{- end -}}
{{- $longest | int -}}
{{- end -}}

{{/* Seconds a stopping gateway lets open requests and streams finish (SLUICEGATE_DRAIN_TIMEOUT):
gateway.shutdown.drainTimeoutSeconds as given, or, when empty, the longest timeouts.total of the
model table, so that a rollout cuts no answer. The env and the grace period both read this. */}}
{{- define "sluicegate.drainTimeoutSeconds" -}}
{{- $drain := .Values.gateway.shutdown.drainTimeoutSeconds -}}
{{- if kindIs "invalid" $drain -}}
{{- include "sluicegate.longestAnswer" . -}}
{{- else -}}
{{- $drain | toString -}}
{{- end -}}
{{- end -}}

{{/* The shortest grace period that lets a gateway pod finish its shutdown: the delay, the whole
drain, then the flush, in whole seconds. */}}
{{- define "sluicegate.gatewayShutdownSeconds" -}}
{{- $drain := include "sluicegate.drainTimeoutSeconds" . | float64 -}}
{{- add (ceil (addf .Values.gateway.shutdown.delaySeconds $drain) | int) (include "sluicegate.gatewayFlushSeconds" . | int) -}}
{{- end -}}

{{- define "sluicegate.gatewayGracePeriod" -}}
{{- if kindIs "invalid" .Values.gateway.terminationGracePeriodSeconds -}}
{{- include "sluicegate.gatewayShutdownSeconds" . -}}
{{- else -}}
{{- .Values.gateway.terminationGracePeriodSeconds | int -}}
{{- end -}}
{{- end -}}

{{- define "sluicegate.preStop" -}}
preStop:
  exec:
    command: ["sleep", "{{ . }}"]
{{- end -}}

{{/* Where people reach the admin plane from outside (SLUICEGATE_PUBLIC_URL: the IdP sends them
back under it): the admin Ingress's host (https when it has TLS), or the admin HTTPRoute's
hostname (https: a Gateway's listener for people terminates TLS); empty without either. */}}
{{- define "sluicegate.adminPublicUrl" -}}
{{- $ingress := .Values.gateway.adminIngress -}}
{{- $route := .Values.gateway.adminHttpRoute -}}
{{- if and $ingress.enabled $ingress.host -}}
{{- printf "%s://%s" (ternary "https" "http" (not (empty $ingress.tls))) $ingress.host -}}
{{- else if and $route.enabled $route.hostname -}}
{{- printf "https://%s" $route.hostname -}}
{{- end -}}
{{- end -}}

{{/* A model's overflow providers in the model table (docs/overflow.md): a provider's keySecret and
caSecret become files of the Secret mounted at OVERFLOW_SECRETS/<secret name> (gateway.yaml). */}}
{{- define "sluicegate.overflowSecretsDir" -}}/var/run/secrets/sluicegate-overflow{{- end -}}
{{- define "sluicegate.overflow" -}}
{{- $dir := include "sluicegate.overflowSecretsDir" . -}}
{{- $providers := list -}}
{{- range .providers -}}
{{- $p := dict "name" .name "url" .url "model" .model "price" .price -}}
{{- if .keySecret }}{{ $_ := set $p "key_file" (printf "%s/%s/%s" $dir .keySecret.name .keySecret.key) }}
{{- else if .key_env }}{{ $_ := set $p "key_env" .key_env }}
{{- else if .key_file }}{{ $_ := set $p "key_file" .key_file }}{{ end -}}
{{- if .caSecret }}{{ $_ := set $p "ca_file" (printf "%s/%s/%s" $dir .caSecret.name .caSecret.key) }}
{{- else if .ca_file }}{{ $_ := set $p "ca_file" .ca_file }}{{ end -}}
{{- $providers = append $providers $p -}}
{{- end -}}
{{- toYaml (dict "after_ms" .after_ms "max_concurrency" .max_concurrency "providers" $providers) -}}
{{- end -}}

{{/* The Secrets the models' overflow providers name (keySecret, caSecret), each once, as JSON. */}}
{{- define "sluicegate.overflowSecrets" -}}
{{- $names := list -}}
{{- range .Values.models -}}
{{- if .overflow -}}
{{- range .overflow.providers -}}
{{- if .keySecret }}{{ $names = append $names .keySecret.name }}{{ end -}}
{{- if .caSecret }}{{ $names = append $names .caSecret.name }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson (uniq $names) -}}
{{- end -}}
