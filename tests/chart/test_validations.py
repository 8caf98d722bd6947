"""Bad values fail `helm template` with a message that names the key and the way out: the schema
for types and enums, templates/_validations.tpl for contradictions between keys."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.cases import PROMETHEUS
from tests.chart.conftest import Renderer

VLLM: dict[str, Any] = {"name": "m", "engine": "vllm", "vllm": {"model": "org/m"}}

BAD_VALUES: dict[str, tuple[dict[str, Any], str]] = {
    "redis off without a url": (
        {"redis": {"enabled": False}},
        "redis.enabled=false needs redis.external.url or redis.external.existingSecret",
    ),
    "bundled and external redis": (
        {"redis": {"external": {"url": "redis://elsewhere:6379/0"}}},
        "redis.external.* is set while redis.enabled=true",
    ),
    "two external redis sources": (
        {"redis": {"enabled": False, "external": {"url": "redis://r:6379/0", "existingSecret": "s"}}},
        "redis.external.url and redis.external.existingSecret are both set",
    ),
    "external redis url scheme": (
        {"redis": {"enabled": False, "external": {"url": "http://r:6379"}}},
        "redis.external.url must start with redis://, rediss://, redis+sentinel://, redis+cluster:// or rediss+cluster://",
    ),
    "vllm without a model id": (
        {"models": [{"name": "m", "engine": "vllm"}]},
        "models[0] (m): engine vllm needs vllm.model",
    ),
    "vllm without a gpu": (
        {"models": [{**VLLM, "gpus": 0}]},
        "models[0] (m): engine vllm runs the CUDA image and needs gpus >= 1",
    ),
    "duplicate model names": (
        {"models": [VLLM, {**VLLM, "engine": "external", "external": {"url": "http://w:8000"}}]},
        'models[1]: the model name "m" is already used by models[0]',
    ),
    "alias taken by another model": (
        {
            "models": [VLLM],
            "extraModels": [{"name": "x", "aliases": ["m"], "endpoints": [{"url": "http://w"}]}],
        },
        'extraModels[0]: the model name "m" is already used by models[0]',
    ),
    "unknown fallback": (
        {"models": [{**VLLM, "fallbacks": ["nope"]}]},
        'models[0] (m): fallback "nope" is not a model of this release',
    ),
    "external with neither url nor service": (
        {"models": [{"name": "m", "engine": "external"}]},
        "models[0] (m): engine external needs exactly one of external.url",
    ),
    "external with both url and service": (
        {
            "models": [
                {"name": "m", "engine": "external", "external": {"url": "http://w:8000", "service": "w"}}
            ]
        },
        "models[0] (m): engine external needs exactly one of external.url",
    ),
    "reframr without weights": (
        {"models": [{"name": "r", "engine": "reframr"}]},
        "models[0] (r): engine reframr (mode runtime) needs modelVolume.existingClaim",
    ),
    "shared ReadWriteOnce cache": (
        {"models": [{**VLLM, "replicas": 2, "cache": {"type": "pvc"}}]},
        "models[0] (m): a ReadWriteOnce cache PVC cannot be shared by 2 replicas",
    ),
    "keda without prometheus": (
        {"models": [{**VLLM, "keda": {"enabled": True}}]},
        "models[0] (m): keda.enabled needs keda.prometheus.serverAddress",
    ),
    "keda min above max": (
        {
            "keda": {"prometheus": {"serverAddress": PROMETHEUS}},
            "models": [{**VLLM, "keda": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}}],
        },
        "models[0] (m): keda.minReplicas (5) is above keda.maxReplicas (2)",
    ),
    "hpa min above max": (
        {"gateway": {"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 3}}},
        "gateway.autoscaling.minReplicas (5) is above gateway.autoscaling.maxReplicas (3)",
    ),
    "pdb blocks every drain": (
        {"gateway": {"replicas": 1}},
        "gateway.pdb.minAvailable (1) must be below the gateway's replicas (1)",
    ),
    "pdb blocks every drain under autoscaling": (
        {"gateway": {"autoscaling": {"enabled": True, "minReplicas": 1}}},
        "gateway.pdb.minAvailable (1) must be below the gateway's autoscaling.minReplicas (1)",
    ),
    "pdb with both bounds": (
        {"gateway": {"pdb": {"maxUnavailable": 1}}},
        "gateway.pdb: set minAvailable or maxUnavailable, not both",
    ),
    "grace period that cuts the derived drain short": (
        {"gateway": {"terminationGracePeriodSeconds": 614}},
        "gateway.terminationGracePeriodSeconds (614) would cut the shutdown short: it needs at least "
        "gateway.shutdown.delaySeconds (5) + gateway.shutdown.drainTimeoutSeconds (600, the longest "
        "timeouts.total of the models) + 10 s to flush metering = 615",
    ),
    "grace period below a model's longer answers": (
        {
            "models": [{**VLLM, "timeouts": {"total": 900}}],
            "gateway": {"terminationGracePeriodSeconds": 615},
        },
        "gateway.shutdown.drainTimeoutSeconds (900, the longest timeouts.total of the models) + 10 s to "
        "flush metering = 915",
    ),
    "grace period that cuts an explicit drain short": (
        {"gateway": {"shutdown": {"drainTimeoutSeconds": 30}, "terminationGracePeriodSeconds": 44}},
        "gateway.terminationGracePeriodSeconds (44) would cut the shutdown short: it needs at least "
        "gateway.shutdown.delaySeconds (5) + gateway.shutdown.drainTimeoutSeconds (30) + 10 s to flush "
        "metering = 45",
    ),
    "grace period below a raised drain": (
        {"gateway": {"shutdown": {"drainTimeoutSeconds": 3600}, "terminationGracePeriodSeconds": 900}},
        "gateway.shutdown.drainTimeoutSeconds (3600) + 10 s to flush metering = 3615",
    ),
    "removed preStop sleep": (
        {"gateway": {"preStopSleepSeconds": 10}},
        "gateway.preStopSleepSeconds is gone: the gateway now waits by itself after SIGTERM",
    ),
    "negative shutdown delay": (
        {"gateway": {"shutdown": {"delaySeconds": -1}}},
        "at '/gateway/shutdown/delaySeconds'",
    ),
    "drain timeout as a word": (
        {"gateway": {"shutdown": {"drainTimeoutSeconds": "30s"}}},
        "at '/gateway/shutdown/drainTimeoutSeconds': got string, want null or number",
    ),
    "one spool claim shared by replicas": (
        {"gateway": {"spool": {"persistence": {"enabled": True, "existingClaim": "spool"}}}},
        "gateway.spool.persistence.existingClaim holds one spool file, but the gateway may run 2 replicas "
        "(replicas)",
    ),
    "one spool claim shared by autoscaled replicas": (
        {
            "gateway": {
                "replicas": 1,
                "pdb": {"enabled": False},
                "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4},
                "spool": {"persistence": {"enabled": True, "existingClaim": "spool"}},
            }
        },
        "the gateway may run 4 replicas (autoscaling.maxReplicas)",
    ),
    "spool claim without persistence": (
        {"gateway": {"spool": {"persistence": {"existingClaim": "spool"}}}},
        "gateway.spool.persistence.existingClaim is set while gateway.spool.persistence.enabled=false",
    ),
    "spool claim size without a unit": (
        {"gateway": {"spool": {"persistence": {"enabled": True, "size": "a lot"}}}},
        "at '/gateway/spool/persistence/size'",
    ),
    "admin token given twice": (
        {"auth": {"existingSecret": "s", "adminToken": "t" * 32}},
        "auth.adminToken and auth.existingSecret are both set",
    ),
    "admin token too short": (
        {"auth": {"adminToken": "t" * 31}},
        "auth.adminToken is 31 characters: the gateway needs at least 32",
    ),
    "floating image tag": (
        {"gateway": {"image": {"tag": "latest"}}},
        "at '/gateway/image/tag'",
    ),
    "replicas as a word": (
        {"gateway": {"replicas": "two"}},
        "at '/gateway/replicas': got string, want integer",
    ),
    "unknown engine": (
        {"models": [{"name": "m", "engine": "tgi"}]},
        "at '/models/0/engine'",
    ),
    "misspelt key": ({"gateway": {"replica": 3}}, "additional properties 'replica' not allowed"),
    "allow-list model pattern": (
        {"gateway": {"discovery": {"modelNamespaces": {"a*b": ["team-a"]}}}},
        "at '/gateway/discovery/modelNamespaces': additional properties 'a*b' not allowed",
    ),
    "allow-list without a namespace": (
        {"gateway": {"discovery": {"modelNamespaces": {"llama": []}}}},
        "at '/gateway/discovery/modelNamespaces/llama'",
    ),
    "weight cap zero": (
        {"gateway": {"discovery": {"maxWeight": 0}}},
        "at '/gateway/discovery/maxWeight'",
    ),
    "header timeout zero": (
        {"gateway": {"connections": {"headerTimeoutSeconds": 0}}},
        "at '/gateway/connections/headerTimeoutSeconds'",
    ),
    "header cap too small for any request": (
        {"gateway": {"connections": {"maxHeaderBytes": 100}}},
        "at '/gateway/connections/maxHeaderBytes'",
    ),
    "bad model name": (
        {"models": [{**VLLM, "name": "has space"}]},
        "at '/models/0/name'",
    ),
    "http route without a gateway": (
        {"gateway": {"httpRoute": {"enabled": True}}},
        "gateway.httpRoute.enabled needs gateway.httpRoute.parentRefs",
    ),
    "native protocols on reframr": (
        {"models": [{"name": "r", "engine": "reframr", "mode": "test", "protocols": {"messages": "native"}}]},
        "models[0] (r): engine reframr serves the chat contract only",
    ),
    "tokenize on reframr": (
        {"models": [{"name": "r", "engine": "reframr", "mode": "test", "tokenize": True}]},
        "models[0] (r): engine reframr serves the chat contract only",
    ),
    "unknown protocol": (
        {"models": [{**VLLM, "protocols": {"messages": "nativ"}}]},
        "at '/models/0/protocols/messages'",
    ),
    "price as a word": (
        {"models": [{**VLLM, "price": {"input_per_million": "cheap", "output_per_million": "1"}}]},
        "at '/models/0/price/input_per_million'",
    ),
    "price without an output price": (
        {"models": [{**VLLM, "price": {"input_per_million": "0.1"}}]},
        "at '/models/0/price'",
    ),
    "unknown log format": (
        {"gateway": {"logFormat": "xml"}},
        "at '/gateway/logFormat'",
    ),
    "ingress host with a path": (
        {"gateway": {"ingress": {"enabled": True, "hosts": ["llm.example.com/admin"]}}},
        "at '/gateway/ingress/hosts/0'",
    ),
    "admin entrance without an admin port": (
        {"gateway": {"adminPort": 0, "adminIngress": {"enabled": True, "host": "llm-admin.example.com"}}},
        "gateway.adminIngress publishes the admin plane, which needs a port of its own",
    ),
    "admin entrance without a host": (
        {"gateway": {"adminHttpRoute": {"enabled": True, "parentRefs": [{"name": "gw"}]}}},
        "gateway.adminHttpRoute needs the admin plane's own host name (gateway.adminHttpRoute.hostname)",
    ),
    "console client without its secret": (
        {"oidc": {"issuer": "https://idp.example.com", "clientId": "console"}},
        "oidc.clientId needs oidc.clientSecret.existingSecret",
    ),
    "oidc issuer over http": (
        {"oidc": {"issuer": "http://idp.example.com", "audience": "a"}},
        "at '/oidc/issuer'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_bad_values_fail_with_a_clear_message(render: Renderer, case: str) -> None:
    values, message = BAD_VALUES[case]
    result = render(values=values)
    assert not result.objects, f"{case}: rendered anyway"
    assert message in result.error, result.error


def test_every_problem_is_reported_at_once(render: Renderer) -> None:
    result = render(values={"redis": {"enabled": False}, "models": [{"name": "m", "engine": "vllm"}]})
    assert "redis.enabled=false needs" in result.error
    assert "engine vllm needs vllm.model" in result.error
