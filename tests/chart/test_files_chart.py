"""The Files and Batch API in the chart: off by default; on, a ReadWriteMany claim (or yours)
mounted by every gateway replica, and SLUICEGATE_FILES_URL pointing at it."""

from __future__ import annotations

from tests.chart.conftest import Renderer, containers, gateway, gateway_env, rendered


def test_files_are_off_unless_asked(render: Renderer) -> None:
    result = rendered(render)
    assert "SLUICEGATE_FILES_URL" not in gateway_env(result)
    assert not result.of_kind("PersistentVolumeClaim")


def test_files_live_on_a_read_write_many_claim_every_replica_mounts(render: Renderer) -> None:
    result = rendered(render, values={"gateway": {"files": {"enabled": True, "size": "50Gi"}}})
    env = gateway_env(result)
    assert env["SLUICEGATE_FILES_URL"]["value"] == "file:///var/lib/sluicegate-files"
    assert env["SLUICEGATE_FILES_RETENTION_S"]["value"] == "2592000"
    claims = result.of_kind("PersistentVolumeClaim")
    assert len(claims) == 1
    assert claims[0]["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claims[0]["spec"]["resources"]["requests"]["storage"] == "50Gi"
    pod = gateway(result)["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "files")
    assert volume["persistentVolumeClaim"]["claimName"] == claims[0]["metadata"]["name"]
    mounts = containers(gateway(result))[0]["volumeMounts"]
    assert {"name": "files", "mountPath": "/var/lib/sluicegate-files"} in mounts


def test_an_existing_claim_is_used_as_it_is(render: Renderer) -> None:
    result = rendered(render, values={"gateway": {"files": {"enabled": True, "existingClaim": "shared-rwx"}}})
    assert not result.of_kind("PersistentVolumeClaim")
    pod = gateway(result)["spec"]["template"]["spec"]
    assert next(v for v in pod["volumes"] if v["name"] == "files")["persistentVolumeClaim"] == {
        "claimName": "shared-rwx"
    }
