"""The values sets every render test runs over: the defaults, the shipped examples, and edge cases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.chart.conftest import EXAMPLES

PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"

ODD_NAMES: dict[str, Any] = {
    "models": [
        {
            # Slashes, colons and upper case: no Kubernetes name or label value can hold it.
            "name": "meta-llama/Llama-3.1-8B-Instruct:fp8",
            "engine": "vllm",
            "aliases": ["llama"],
            "vllm": {"model": "meta-llama/Llama-3.1-8B-Instruct", "toolCallParser": "llama3_json"},
            "fallbacks": ["remote-model"],
        },
        {"name": "remote-model", "engine": "external", "external": {"url": "http://10.0.0.5:8000"}},
        {
            "name": "shared-model",
            "engine": "external",
            "external": {"service": "shared-llm", "namespace": "shared-llm", "port": "http"},
        },
    ],
    "extraModels": [
        {
            "name": "canary-model",
            "pools": [
                {"name": "stable", "weight": 90, "discovery": {"kubernetes": {"service": "llama-stable"}}},
                {
                    "name": "canary",
                    "weight": 10,
                    "discovery": {"kubernetes": {"namespace": "canary", "service": "llama-canary"}},
                },
            ],
        }
    ],
    "gateway": {"discovery": {"namespaces": ["extra-ns"]}},
}

AUTODISCOVERY: dict[str, Any] = {
    "gateway": {
        "discovery": {
            "autodiscovery": True,
            "namespaces": ["team-a"],
            "modelNamespaces": {"team-a/*": ["team-a"], "llama": ["shared-llm", "canary"], "*": ["team-a"]},
            "maxWeight": 10,
        }
    },
}

KEDA: dict[str, Any] = {
    "keda": {"prometheus": {"serverAddress": PROMETHEUS}},
    "models": [
        {
            "name": "qwen",
            "engine": "vllm",
            "vllm": {"model": "Qwen/Qwen2.5-7B-Instruct"},
            "keda": {"enabled": True, "minReplicas": 1, "maxReplicas": 3},
        },
        {
            "name": "reframr",
            "engine": "reframr",
            "mode": "test",
            "keda": {"enabled": True, "metric": "gatewayQueue", "threshold": 2},
        },
    ],
}

# The gateway as a StatefulSet with a usage spool claim per replica.
SPOOL_CLAIMS: dict[str, Any] = {
    "gateway": {"spool": {"persistence": {"enabled": True, "size": "2Gi", "storageClass": "fast-ssd"}}}
}
SPOOL_CLAIMS_AUTOSCALED: dict[str, Any] = {
    "gateway": {
        "spool": {"persistence": {"enabled": True}},
        "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 6},
    },
    "monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
}
# One replica on a claim of the user's.
SPOOL_EXISTING_CLAIM: dict[str, Any] = {
    "gateway": {
        "replicas": 1,
        "pdb": {"enabled": False},
        "spool": {"persistence": {"enabled": True, "existingClaim": "gateway-spool"}},
    }
}

# The client APIs published outside the cluster, both ways, with the gateway logging JSON.
PUBLISHED: dict[str, Any] = {
    "gateway": {
        "logFormat": "json",
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "annotations": {"nginx.ingress.kubernetes.io/proxy-buffering": "off"},
            "hosts": ["llm.example.com", "llm.internal.example.com"],
            "tls": [{"secretName": "llm-tls", "hosts": ["llm.example.com"]}],
        },
        "httpRoute": {
            "enabled": True,
            "parentRefs": [{"name": "public", "namespace": "gateway-system", "sectionName": "https"}],
            "hostnames": ["llm.example.com"],
            "timeouts": {"request": "3600s"},
        },
    }
}

# Every model-table setting a chart model may carry: native protocols, worker token counts, the
# agents' normalisation, hosted tools, output caps and prices (strings and numbers).
NATIVE_MODELS: dict[str, Any] = {
    "models": [
        {
            "name": "qwen3-32b",
            "engine": "vllm",
            "vllm": {"model": "Qwen/Qwen3-32B", "toolCallParser": "hermes", "maxModelLen": 32768},
            "protocols": {"messages": "native", "responses": "native"},
            "tokenize": True,
            "native_normalise": True,
            "hosted_tools": "refuse",
            "max_output_tokens": 8192,
            "context_window": 32768,
            "default_max_tokens": 4096,
            "price": {"input_per_million": "0.15", "output_per_million": "0.60", "currency": "EUR"},
        },
        {
            "name": "remote",
            "engine": "external",
            "external": {"url": "http://10.0.0.5:8000"},
            "protocols": {"responses": "native"},
            "price": {"input_per_million": 2, "output_per_million": 0.5, "currency": "EUR"},
        },
        {"name": "reframr", "engine": "reframr", "mode": "test", "native_normalise": False},
    ],
    "extraModels": [
        {
            "name": "canary",
            "endpoints": [{"url": "http://10.0.0.6:8000"}],
            "price": {"input_per_million": "0.1", "output_per_million": "0.3", "currency": "EUR"},
        }
    ],
}

# name -> (values files, values)
CASES: dict[str, tuple[tuple[Path, ...], dict[str, Any] | None]] = {
    "default": ((), None),
    "gpu-cluster": ((EXAMPLES / "gpu-cluster.yaml",), None),
    "cpu-dev": ((EXAMPLES / "cpu-dev.yaml",), None),
    "external-redis-url": (
        (),
        {"redis": {"enabled": False, "external": {"url": "rediss://:s3cret@redis.example.com:6380/0"}}},
    ),
    "external-redis-cluster": (
        (),
        {
            "redis": {
                "enabled": False,
                "external": {
                    "url": "rediss+cluster://:s3cret@node-a.example.com:6379,node-b.example.com:6379/"
                },
            }
        },
    ),
    "external-redis-secret": (
        (),
        {"redis": {"enabled": False, "external": {"existingSecret": "managed-redis"}}},
    ),
    "existing-secrets": (
        (),
        {
            "auth": {"existingSecret": "my-admin"},
            "redis": {"auth": {"existingSecret": "my-redis", "existingSecretPasswordKey": "pw"}},
        },
    ),
    "redis-no-auth-no-persistence": (
        (),
        {"redis": {"auth": {"enabled": False}, "persistence": {"enabled": False}}},
    ),
    "no-workers": ((), {"models": []}),
    "monitoring": (
        (),
        {"monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}},
    ),
    "autoscaling": ((), {"gateway": {"autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 6}}}),
    "keda": ((), KEDA),
    "odd-names": ((), ODD_NAMES),
    "autodiscovery-allow-list": ((), AUTODISCOVERY),
    "spool-claims": ((), SPOOL_CLAIMS),
    "spool-claims-autoscaled": ((), SPOOL_CLAIMS_AUTOSCALED),
    "spool-existing-claim": ((), SPOOL_EXISTING_CLAIM),
    "batch-files": ((), {"gateway": {"files": {"enabled": True, "storageClass": "nfs"}}}),
    "published": ((), PUBLISHED),
    "native-models": ((), NATIVE_MODELS),
}
