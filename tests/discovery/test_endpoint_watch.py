"""EndpointSlice discovery against a fake API server on loopback, through the real client library:
readiness, slices coming and going, streams that drop or end, 410 Gone, bookmarks, outages."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from gateway.config import Settings
from gateway.discovery.kubernetes import Discovery, DiscoveryOptions, start_discovery
from gateway.discovery.watch import ListWatch
from gateway.model_table import ModelTable
from tests.discovery.fake_apiserver import FakeApiServer, running_apiserver
from tests.discovery.harness import (
    FAST,
    RecordingSink,
    discovering,
    k8s_model,
    run_with_apiserver,
)
from tests.discovery.objects import endpoint, endpoint_slice
from tests.waiting import eventually

SLICES = "endpointslices"
TABLE = ModelTable((k8s_model("llama", "llama"),))
POOL = "llama"


def _watch(discovery: Discovery, namespace: str = "llm", service: str = "llama") -> ListWatch:
    assert discovery.endpoints is not None
    watch = discovery.endpoints.watch_for(namespace, service)
    assert watch is not None
    return watch


def test_endpoints_appear_and_follow_ready_and_terminating(tmp_path: Path, all_logs: list[str]) -> None:
    async def scenario(server: FakeApiServer) -> None:
        server.put(
            SLICES, endpoint_slice("llm", "llama-a", "llama", [endpoint("10.0.0.1"), endpoint("10.0.0.2")])
        )
        async with discovering(server, tmp_path, TABLE) as (_, sink):
            await eventually(
                lambda: sink.endpoints.get(POOL) == ["http://10.0.0.1:8000", "http://10.0.0.2:8000"],
                "both endpoints",
            )
            server.put(
                SLICES,
                endpoint_slice(
                    "llm", "llama-a", "llama", [endpoint("10.0.0.1"), endpoint("10.0.0.2", ready=False)]
                ),
            )
            await eventually(
                lambda: sink.endpoints[POOL] == ["http://10.0.0.1:8000"], "not-ready one removed"
            )
            # ready unset means ready; terminating means leaving, even while it still answers.
            server.put(
                SLICES,
                endpoint_slice(
                    "llm",
                    "llama-a",
                    "llama",
                    [endpoint("10.0.0.1", terminating=True), endpoint("10.0.0.2", ready=None)],
                ),
            )
            await eventually(lambda: sink.endpoints[POOL] == ["http://10.0.0.2:8000"], "terminating removed")
            server.put(SLICES, endpoint_slice("llm", "llama-a", "llama", []))
            await eventually(lambda: sink.endpoints[POOL] == [], "all gone")
            assert sink.endpoint_sets(POOL) == [
                ("http://10.0.0.1:8000", "http://10.0.0.2:8000"),
                ("http://10.0.0.1:8000",),
                ("http://10.0.0.2:8000",),
                (),
            ]

    run_with_apiserver(scenario, all_logs)


def test_slices_are_unioned_and_a_deleted_slice_takes_its_endpoints(
    tmp_path: Path, all_logs: list[str]
) -> None:
    async def scenario(server: FakeApiServer) -> None:
        server.put(SLICES, endpoint_slice("llm", "llama-a", "llama", [endpoint("10.0.0.1")]))
        server.put(SLICES, endpoint_slice("llm", "llama-b", "llama", [endpoint("10.0.0.2")]))
        # Neither another Service's slice nor another namespace's counts.
        server.put(SLICES, endpoint_slice("llm", "other-a", "other", [endpoint("10.0.9.9")]))
        server.put(SLICES, endpoint_slice("dev", "llama-a", "llama", [endpoint("10.0.8.8")]))
        async with discovering(server, tmp_path, TABLE) as (_, sink):
            await eventually(
                lambda: sink.endpoints.get(POOL) == ["http://10.0.0.1:8000", "http://10.0.0.2:8000"], "union"
            )
            server.delete(SLICES, "llm", "llama-b")
            await eventually(lambda: sink.endpoints[POOL] == ["http://10.0.0.1:8000"], "slice deleted")
            server.put(SLICES, endpoint_slice("llm", "other-a", "other", [endpoint("10.0.9.8")]))
            server.put(SLICES, endpoint_slice("llm", "llama-c", "llama", [endpoint("10.0.0.3")]))
            await eventually(lambda: len(sink.endpoints[POOL]) == 2, "a new slice")
            assert all("10.0.9" not in url for urls in sink.endpoint_sets(POOL) for url in urls)

    run_with_apiserver(scenario, all_logs)


def test_ports_by_name_or_number_and_ipv6_with_own_namespace(tmp_path: Path, all_logs: list[str]) -> None:
    table = ModelTable(
        (
            # namespace None: the gateway's own, here the kubeconfig context's ("llm").
            k8s_model("by-name", "multi", namespace=None, port="api"),
            k8s_model("by-number", "multi", port=9090),
        )
    )

    async def scenario(server: FakeApiServer) -> None:
        multi = endpoint_slice("llm", "multi-a", "multi", [endpoint("fd00::1")], address_type="IPv6")
        multi["ports"] = [
            {"name": "api", "port": 8000, "protocol": "TCP"},
            {"name": "metrics", "port": 9090, "protocol": "TCP"},
        ]
        server.put(SLICES, multi)
        async with discovering(server, tmp_path, table) as (discovery, sink):
            await eventually(lambda: len(sink.endpoints) == 2, "both pools")
            assert sink.endpoints == {
                "by-name": ["http://[fd00::1]:8000"],
                "by-number": ["http://[fd00::1]:9090"],
            }
            assert discovery.access is not None
            assert discovery.access.namespace == "llm"
            # One watch serves both pools of the Service.
            assert len({(w.namespace, w.query["labelSelector"]) for w in server.watches(SLICES)}) == 1

    run_with_apiserver(scenario, all_logs)


@pytest.mark.parametrize("how", ["dropped", "ended"])
def test_a_stream_that_drops_or_ends_resumes_from_the_last_resource_version(
    tmp_path: Path, all_logs: list[str], how: str
) -> None:
    async def scenario(server: FakeApiServer) -> None:
        server.put(SLICES, endpoint_slice("llm", "llama-a", "llama", [endpoint("10.0.0.1")]))
        async with discovering(server, tmp_path, TABLE) as (discovery, sink):
            await eventually(lambda: sink.endpoints.get(POOL) == ["http://10.0.0.1:8000"], "first endpoint")
            await eventually(lambda: server.open_streams == 1, "a watch stream")
            seen = server.put(SLICES, endpoint_slice("llm", "llama-b", "llama", [endpoint("10.0.0.2")]))
            await eventually(lambda: len(sink.endpoints[POOL]) == 2, "second endpoint")
            assert _watch(discovery).resource_version == seen["metadata"]["resourceVersion"]
            watches_before = len(server.watches(SLICES))
            if how == "dropped":
                server.drop_watches()
            else:
                server.end_watches()
            await eventually(lambda: len(server.watches(SLICES)) > watches_before, "a new watch")
            server.put(SLICES, endpoint_slice("llm", "llama-c", "llama", [endpoint("10.0.0.3")]))
            await eventually(lambda: len(sink.endpoints[POOL]) == 3, "a change after the resume")
            assert len(server.lists(SLICES)) == 1, "resumed without a re-list"
            resumed = server.watches(SLICES)[watches_before]
            assert resumed.query["resourceVersion"] == seen["metadata"]["resourceVersion"]
            assert resumed.query["allowWatchBookmarks"] in ("true", "True")
            assert resumed.query["timeoutSeconds"] == "30"

    run_with_apiserver(scenario, all_logs)


@pytest.mark.parametrize("over_http", [False, True], ids=["error-event", "http-410"])
def test_410_gone_forces_a_relist_that_catches_what_happened_in_the_gap(
    tmp_path: Path, all_logs: list[str], over_http: bool
) -> None:
    async def scenario(server: FakeApiServer) -> None:
        server.gone_over_http = over_http
        server.put(SLICES, endpoint_slice("llm", "llama-a", "llama", [endpoint("10.0.0.1")]))
        server.put(SLICES, endpoint_slice("llm", "llama-b", "llama", [endpoint("10.0.0.2")]))
        async with discovering(server, tmp_path, TABLE) as (_, sink):
            await eventually(lambda: len(sink.endpoints.get(POOL, ())) == 2, "both endpoints")
            # The list alone is not enough: a watch that opens only after the outage gets its 410
            # right after that list, a different path (paused, then listed again).
            await eventually(lambda: server.open_streams == 1, "a watch stream")
            await server.go_down()
            # While the gateway cannot watch: one slice deleted, one changed, history compacted.
            server.delete(SLICES, "llm", "llama-b")
            server.put(SLICES, endpoint_slice("llm", "llama-a", "llama", [endpoint("10.0.0.7")]))
            server.compact()
            await server.come_back()
            await eventually(lambda: sink.endpoints[POOL] == ["http://10.0.0.7:8000"], "state after re-list")
            assert len(server.lists(SLICES)) == 2
            assert any(w.status == (410 if over_http else 200) for w in server.watches(SLICES)[1:])
            server.put(SLICES, endpoint_slice("llm", "llama-b", "llama", [endpoint("10.0.0.8")]))
            await eventually(lambda: len(sink.endpoints[POOL]) == 2, "watching again after the re-list")
            assert () not in sink.endpoint_sets(POOL), "never emptied by the outage"

    run_with_apiserver(scenario, all_logs)


def test_bookmarks_advance_the_resource_version_so_a_resume_needs_no_relist(
    tmp_path: Path, all_logs: list[str]
) -> None:
    async def scenario(server: FakeApiServer) -> None:
        server.put(SLICES, endpoint_slice("llm", "llama-a", "llama", [endpoint("10.0.0.1")]))
        async with discovering(server, tmp_path, TABLE) as (discovery, sink):
            await eventually(lambda: POOL in sink.endpoints, "first endpoint")
            await eventually(lambda: server.open_streams == 1, "a watch stream")
            listed_at = _watch(discovery).resource_version
            for i in range(5):  # changes this watch does not see
                server.put(SLICES, endpoint_slice("dev", f"x-{i}", "x", [endpoint("10.1.0.1")]))
            server.bookmark()
            await eventually(
                lambda: _watch(discovery).resource_version == str(server.rv), "the bookmark's rv"
            )
            assert listed_at != str(server.rv)
            # Without the bookmark, resuming from listed_at would now be 410 and need a re-list.
            server.compact()
            server.drop_watches()
            server.put(SLICES, endpoint_slice("llm", "llama-b", "llama", [endpoint("10.0.0.2")]))
            await eventually(lambda: len(sink.endpoints[POOL]) == 2, "a change after the resume")
            assert len(server.lists(SLICES)) == 1
            assert all(w.status == 200 for w in server.watches(SLICES))

    run_with_apiserver(scenario, all_logs)


def test_a_failing_api_server_keeps_endpoints_without_a_hot_loop(tmp_path: Path, all_logs: list[str]) -> None:
    async def scenario(server: FakeApiServer) -> None:
        server.put(SLICES, endpoint_slice("llm", "llama-a", "llama", [endpoint("10.0.0.1")]))
        async with discovering(server, tmp_path, TABLE) as (_, sink):
            await eventually(lambda: POOL in sink.endpoints, "first endpoint")
            await eventually(lambda: server.open_streams == 1, "a watch stream")
            before = len(server.requests)
            server.failing = 500
            server.drop_watches()
            await asyncio.sleep(1.5)
            during = len(server.requests) - before
            # Backoff 0.05 s doubling to 0.3 s (with jitter): about 8 tries in 1.5 s; a hot loop
            # would make hundreds.
            assert 2 <= during <= 20, during
            assert sink.endpoints[POOL] == ["http://10.0.0.1:8000"]
            server.failing = None
            server.put(SLICES, endpoint_slice("llm", "llama-b", "llama", [endpoint("10.0.0.2")]))
            await eventually(lambda: len(sink.endpoints[POOL]) == 2, "a change after the outage")
            assert () not in sink.endpoint_sets(POOL)

    run_with_apiserver(scenario, all_logs)


def test_an_api_server_that_goes_away_and_comes_back(tmp_path: Path, all_logs: list[str]) -> None:
    async def scenario(server: FakeApiServer) -> None:
        server.put(SLICES, endpoint_slice("llm", "llama-a", "llama", [endpoint("10.0.0.1")]))
        async with discovering(server, tmp_path, TABLE) as (_, sink):
            await eventually(lambda: POOL in sink.endpoints, "first endpoint")
            await eventually(lambda: server.open_streams == 1, "a watch stream")
            await server.go_down()
            requests = len(server.requests)
            await asyncio.sleep(1.0)  # connections refused meanwhile
            assert len(server.requests) == requests
            assert sink.endpoints[POOL] == ["http://10.0.0.1:8000"]
            server.put(SLICES, endpoint_slice("llm", "llama-b", "llama", [endpoint("10.0.0.2")]))
            await server.come_back()
            await eventually(lambda: len(sink.endpoints[POOL]) == 2, "the change made while it was down")
            assert len(server.lists(SLICES)) == 1, "the history still held the change: no re-list"
            assert () not in sink.endpoint_sets(POOL)

    run_with_apiserver(scenario, all_logs)


def test_an_unreachable_api_server_at_start_does_not_raise(tmp_path: Path, all_logs: list[str]) -> None:
    async def scenario(server: FakeApiServer) -> None:
        await server.go_down()
        server.put(SLICES, endpoint_slice("llm", "llama-a", "llama", [endpoint("10.0.0.1")]))
        async with discovering(server, tmp_path, TABLE) as (discovery, sink):
            await eventually(lambda: discovery.connected, "configuration loaded")
            await asyncio.sleep(0.3)
            assert sink.calls == []
            await server.come_back()
            await eventually(lambda: sink.endpoints.get(POOL) == ["http://10.0.0.1:8000"], "endpoints later")

    run_with_apiserver(scenario, all_logs)


def test_a_missing_kubeconfig_is_retried_not_raised(tmp_path: Path, all_logs: list[str]) -> None:
    async def scenario(server: FakeApiServer) -> None:
        server.put(SLICES, endpoint_slice("llm", "llama-a", "llama", [endpoint("10.0.0.1")]))
        kubeconfig = tmp_path / "later" / "kubeconfig"
        async with discovering(server, tmp_path, TABLE, kubeconfig=kubeconfig) as (discovery, sink):
            await eventually(
                lambda: any("no usable cluster configuration" in line for line in all_logs), "a log"
            )
            assert not discovery.connected
            kubeconfig.parent.mkdir()
            server.write_kubeconfig(kubeconfig)
            await eventually(lambda: POOL in sink.endpoints, "endpoints once the kubeconfig exists")

    run_with_apiserver(scenario, all_logs)


def test_a_rejected_token_is_logged_without_the_token(tmp_path: Path, all_logs: list[str]) -> None:
    async def scenario(server: FakeApiServer) -> None:
        wrong = "wrong-token-" + server.token[-8:]
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", token=wrong)
        async with discovering(server, tmp_path, TABLE, kubeconfig=kubeconfig) as (_, sink):
            await eventually(
                lambda: any("HTTP 401 Unauthorized" in line for line in all_logs), "a 401 warning"
            )
            assert sink.calls == []
            # The kubeconfig is read again after a 401: a rotated token is picked up.
            server.write_kubeconfig(kubeconfig)
            server.put(SLICES, endpoint_slice("llm", "llama-a", "llama", [endpoint("10.0.0.1")]))
            await eventually(lambda: POOL in sink.endpoints, "endpoints with the new token")
        text = "\n".join(all_logs)
        assert server.token not in text
        assert wrong not in text

    run_with_apiserver(scenario, all_logs)


def test_in_a_pod_the_service_account_reaches_the_api_server_over_tls(
    tmp_path: Path, all_logs: list[str]
) -> None:
    """The in-cluster path end to end: KUBERNETES_SERVICE_HOST, the mounted token, CA and namespace."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(tmp_path / "key.pem"), "-out", str(sa / "ca.crt"), "-days", "1",
            "-subj", "/CN=fake-apiserver", "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(sa / "ca.crt", tmp_path / "key.pem")
    (sa / "namespace").write_text("llm")
    table = ModelTable((k8s_model("llama", "llama", namespace=None),))

    async def scenario() -> None:
        async with running_apiserver(context) as server:
            (sa / "token").write_text(server.token)
            server.put(SLICES, endpoint_slice("llm", "llama-a", "llama", [endpoint("10.0.0.1")]))
            environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(server.port)}
            options = DiscoveryOptions(timing=FAST, environ=environ, service_account_dir=str(sa))
            sink = RecordingSink()
            # A kubeconfig in the settings is not used in a pod.
            discovery = await start_discovery(
                Settings(kubeconfig=str(tmp_path / "none")), table, sink, options
            )
            assert discovery is not None
            try:
                await eventually(lambda: sink.endpoints.get(POOL) == ["http://10.0.0.1:8000"], "endpoints")
                assert discovery.access is not None
                assert discovery.access.source == "in-cluster service account"
            finally:
                await discovery.stop()
            text = "\n".join(all_logs)
            assert server.token not in text

    asyncio.run(scenario())
