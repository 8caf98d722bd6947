"""Builders of the Kubernetes objects the discovery tests create in the fake API server."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def endpoint(address: str, *, ready: bool | None = True, terminating: bool | None = None) -> JSON:
    conditions: JSON = {}
    if ready is not None:
        conditions["ready"] = ready
    if terminating is not None:
        conditions["terminating"] = terminating
    return {"addresses": [address], "conditions": conditions}


def endpoint_slice(
    namespace: str,
    name: str,
    service: str,
    endpoints: list[JSON],
    *,
    port: int = 8000,
    port_name: str | None = "http",
    address_type: str = "IPv4",
) -> JSON:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
    }


def service(
    namespace: str,
    name: str,
    *,
    model_label: str | None = "",
    annotations: dict[str, str] | None = None,
    ports: list[JSON] | None = None,
) -> JSON:
    labels = {"app": name}
    if model_label is not None:
        labels["sluicegate.io/model"] = model_label
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "labels": labels,
            "annotations": annotations or {},
        },
        "spec": {
            "type": "ClusterIP",
            "ports": ports if ports is not None else [{"name": "http", "port": 80, "targetPort": 8000}],
        },
    }
