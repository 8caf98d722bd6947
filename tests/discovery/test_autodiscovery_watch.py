"""Autodiscovery: Services labelled sluicegate.io/model become models, against a fake API server."""

from __future__ import annotations

from pathlib import Path

from gateway.discovery.kubernetes import Discovery
from gateway.model_table import KubernetesTarget, ModelConfig, ModelTable, PoolConfig
from tests.discovery.fake_apiserver import FakeApiServer
from tests.discovery.harness import discovering, run_with_apiserver
from tests.discovery.objects import endpoint, endpoint_slice, service
from tests.waiting import eventually

SERVICES = "services"
MODEL = "sluicegate.io/model"
SLICES = "endpointslices"
EMPTY = ModelTable(())


def test_a_labelled_service_becomes_a_model_with_its_annotations_and_endpoints(
    tmp_path: Path, all_logs: list[str]
) -> None:
    async def scenario(server: FakeApiServer) -> None:
        annotations = {
            "sluicegate.io/model": "meta/llama-3-8b",  # a "/" that a label value cannot hold
            "sluicegate.io/aliases": "llama, llama3",
            "sluicegate.io/upstream-model": "/models/llama",
            "sluicegate.io/weight": "9",
        }
        server.put(SERVICES, service("llm", "llama-main", model_label="llama-3-8b", annotations=annotations))
        server.put(SLICES, endpoint_slice("llm", "llama-main-x", "llama-main", [endpoint("10.0.0.1")]))
        server.put(SERVICES, service("llm", "unlabelled", model_label=None))
        async with discovering(server, tmp_path, EMPTY, autodiscovery=True) as (_, sink):
            pool = "meta/llama-3-8b/llm/llama-main"
            await eventually(lambda: pool in sink.endpoints, "the pool's endpoints")
            assert sink.endpoints[pool] == ["http://10.0.0.1:8000"]
            assert sink.models == {
                "meta/llama-3-8b": ModelConfig(
                    name="meta/llama-3-8b",
                    aliases=("llama", "llama3"),
                    pools=(
                        PoolConfig(
                            name=pool,
                            weight=9.0,
                            kubernetes=KubernetesTarget(service="llama-main", namespace="llm", port="http"),
                            upstream_model="/models/llama",
                        ),
                    ),
                )
            }
            assert sink.calls[0] == ("add_model", "meta/llama-3-8b", (pool,)), (
                "the model before its endpoints"
            )
            assert server.lists(SERVICES)[0].query["labelSelector"] == "sluicegate.io/model"

            # A canary: a second Service of the same model is a second pool.
            canary = service(
                "llm", "llama-canary", model_label="x", annotations={"sluicegate.io/model": "meta/llama-3-8b"}
            )
            server.put(SERVICES, canary)
            server.put(
                SLICES, endpoint_slice("llm", "llama-canary-x", "llama-canary", [endpoint("10.0.0.2")])
            )
            canary_pool = "meta/llama-3-8b/llm/llama-canary"
            await eventually(lambda: canary_pool in sink.endpoints, "the canary's endpoints")
            assert [p.name for p in sink.models["meta/llama-3-8b"].pools] == [canary_pool, pool]

            server.delete(SERVICES, "llm", "llama-main")
            await eventually(
                lambda: [p.name for p in sink.models["meta/llama-3-8b"].pools] == [canary_pool],
                "one pool left",
            )
            # The deleted Service's slices change: its pool is gone, nobody is told.
            calls = len(sink.calls)
            server.put(SLICES, endpoint_slice("llm", "llama-main-x", "llama-main", [endpoint("10.0.0.9")]))
            server.delete(SERVICES, "llm", "llama-canary")
            await eventually(lambda: "meta/llama-3-8b" not in sink.models, "the model removed")
            assert sink.calls[calls:] == [("remove_model", "meta/llama-3-8b")]
            await eventually(lambda: server.open_streams == 1, "the slice watches stopped")

    run_with_apiserver(scenario, all_logs)


def test_a_config_name_wins_and_bad_services_are_skipped_with_one_warning(
    tmp_path: Path, all_logs: list[str]
) -> None:
    table = ModelTable((ModelConfig(name="static", aliases=("taken",), endpoints=("http://127.0.0.1:9",)),))

    async def scenario(server: FakeApiServer) -> None:
        server.put(SERVICES, service("llm", "shadow", model_label="static"))
        server.put(
            SERVICES,
            service("llm", "alias-clash", model_label="fine", annotations={"sluicegate.io/aliases": "taken"}),
        )
        server.put(
            SERVICES,
            service("llm", "bad-weight", model_label="w", annotations={"sluicegate.io/weight": "-1"}),
        )
        server.put(SERVICES, service("llm", "no-port", model_label="p", ports=[{"port": 1}, {"port": 2}]))
        server.put(SERVICES, service("llm", "good", model_label="good"))
        async with discovering(server, tmp_path, table, autodiscovery=True) as (_, sink):
            await eventually(lambda: "good" in sink.models, "the good one")
            assert set(sink.models) == {"good"}
            # A change to a bad Service that leaves it bad does not warn again.
            server.put(
                SERVICES,
                service(
                    "llm",
                    "bad-weight",
                    model_label="w",
                    annotations={"sluicegate.io/weight": "-1", "note": "touched"},
                ),
            )
            server.put(
                SERVICES,
                service("llm", "good", model_label="good", annotations={"sluicegate.io/weight": "2"}),
            )
            await eventually(lambda: sink.models["good"].pools[0].weight == 2.0, "the change")
        warnings = [line for line in all_logs if " WARNING " in line and "autodiscovery" in line]
        assert len([w for w in warnings if "llm/shadow" in w and "config file" in w]) == 1
        assert len([w for w in warnings if "llm/alias-clash" in w and "'taken'" in w]) == 1
        assert len([w for w in warnings if "llm/bad-weight" in w and "sluicegate.io/weight" in w]) == 1
        assert len([w for w in warnings if "llm/no-port" in w and "sluicegate.io/port" in w]) == 1

    run_with_apiserver(scenario, all_logs)


def test_a_label_removed_removes_the_model_and_namespaces_are_watched(
    tmp_path: Path, all_logs: list[str]
) -> None:
    async def scenario(server: FakeApiServer) -> None:
        server.put(SERVICES, service("team-a", "one", model_label="one"))
        server.put(SERVICES, service("team-b", "two", model_label="two"))
        server.put(SERVICES, service("llm", "three", model_label="three"))  # not watched
        server.put(SLICES, endpoint_slice("team-b", "two-x", "two", [endpoint("10.2.0.1")]))
        async with discovering(
            server,
            tmp_path,
            EMPTY,
            autodiscovery=True,
            namespaces=("team-a", "team-b"),
            model_namespaces="*=team-a,team-b",
        ) as (_, sink):
            await eventually(lambda: set(sink.models) == {"one", "two"}, "both namespaces")
            await eventually(
                lambda: sink.endpoints.get("two/team-b/two") == ["http://10.2.0.1:8000"], "endpoints"
            )
            # The label taken off: the watch (label-selected) sees the Service leave.
            server.put(SERVICES, service("team-a", "one", model_label=None))
            await eventually(lambda: set(sink.models) == {"two"}, "model one removed")
            # A 410 on the Services watch: the re-list keeps what is still there.
            await server.go_down()
            server.delete(SERVICES, "team-b", "two")
            server.put(SERVICES, service("team-a", "four", model_label="four"))
            server.compact()
            await server.come_back()
            await eventually(lambda: set(sink.models) == {"four"}, "state after the re-list")

    run_with_apiserver(scenario, all_logs)


def test_a_service_claims_a_model_only_from_its_allowed_namespaces_and_weight(
    tmp_path: Path, all_logs: list[str]
) -> None:
    """Issue 11: whoever may create a Service in a watched namespace must not capture another
    team's prompts by labelling a Service with that team's model (or alias) and a huge weight."""
    table = ModelTable((ModelConfig(name="static", endpoints=("http://127.0.0.1:9",)),))
    allow = "shared=team-a;team-b/*=team-b;static=team-a"

    async def scenario(server: FakeApiServer) -> None:
        server.put(SERVICES, service("team-a", "shared", model_label="shared"))
        # team-b registers team-a's model with a weight that would take nearly all its traffic.
        hijack = {"sluicegate.io/weight": "99"}
        server.put(SERVICES, service("team-b", "hijack", model_label="shared", annotations=hijack))
        server.put(SERVICES, service("team-b", "own", model_label="x", annotations={MODEL: "team-b/x"}))
        server.put(SERVICES, service("team-a", "prefix", model_label="y", annotations={MODEL: "team-b/y"}))
        # An alias is a name clients send too: team-a may not claim the gateway namespace's "local".
        grab = {"sluicegate.io/aliases": "local"}
        server.put(SERVICES, service("team-a", "alias-grab", model_label="shared", annotations=grab))
        server.put(SERVICES, service("llm", "local", model_label="local"))  # no entry: own namespace
        server.put(SERVICES, service("team-a", "unlisted", model_label="other"))
        heavy = {"sluicegate.io/weight": "1000"}
        server.put(SERVICES, service("team-a", "heavy", model_label="shared", annotations=heavy))
        # Allowed by the list, yet a config-file model never takes a discovered pool.
        server.put(SERVICES, service("team-a", "shadow", model_label="static"))
        async with discovering(
            server,
            tmp_path,
            table,
            autodiscovery=True,
            namespaces=("llm", "team-a", "team-b"),
            model_namespaces=allow,
        ) as (discovery, sink):
            await eventually(lambda: listed(discovery, 3), "every namespace listed")
            assert {name: [p.name for p in m.pools] for name, m in sink.models.items()} == {
                "shared": ["shared/team-a/shared"],
                "team-b/x": ["team-b/x/team-b/own"],
                "local": ["local/llm/local"],
            }
            assert sink.models["shared"].aliases == ()

            # An event storm on a refused Service, and a 410 re-list: still one warning for it.
            for n in range(5):
                touched = {**hijack, "note": str(n)}
                server.put(SERVICES, service("team-b", "hijack", model_label="shared", annotations=touched))
            lists = len(server.lists(SERVICES))
            await server.go_down()
            server.compact()
            await server.come_back()
            await eventually(lambda: len(server.lists(SERVICES)) >= lists + 3, "every namespace re-listed")
            # The last event of team-b's watch seen: the storm before it was too.
            own = service(
                "team-b", "own", model_label="x", annotations={MODEL: "team-b/x", "sluicegate.io/weight": "2"}
            )
            server.put(SERVICES, own)
            await eventually(lambda: sink.models["team-b/x"].pools[0].weight == 2.0, "team-b's last event")
            # A refused Service that comes within the cap is believed from then on.
            server.put(
                SERVICES,
                service("team-a", "heavy", model_label="shared", annotations={"sluicegate.io/weight": "100"}),
            )
            await eventually(
                lambda: len(sink.models["shared"].pools) == 2, "the heavy Service within the cap"
            )
            assert "team-b/shared/team-b/hijack" not in {p.name for p in sink.models["shared"].pools}
        warnings = [line for line in all_logs if " WARNING " in line and "autodiscovery" in line]

        def about(service_name: str) -> list[str]:
            return [w for w in warnings if f"Service {service_name} ignored" in w]

        assert len(about("team-b/hijack")) == 1
        assert "model 'shared' may be served only from namespace team-a" in about("team-b/hijack")[0]
        assert "team-b/y" in about("team-a/prefix")[0]
        assert "alias 'local' may be served only from namespace llm" in about("team-a/alias-grab")[0]
        assert "SLUICEGATE_KUBERNETES_MODEL_NAMESPACES" in about("team-a/unlisted")[0]
        assert len(about("team-a/heavy")) == 1
        assert "SLUICEGATE_KUBERNETES_MAX_WEIGHT (100)" in about("team-a/heavy")[0]
        assert [w for w in warnings if "team-a/shadow" in w and "config file" in w]

    run_with_apiserver(scenario, all_logs)


def test_watching_a_namespace_no_entry_names_is_said_at_start(tmp_path: Path, all_logs: list[str]) -> None:
    """A namespace watched before the allow-list existed: its Services stop counting, not silently."""

    async def scenario(server: FakeApiServer) -> None:
        server.put(SERVICES, service("team-a", "one", model_label="one"))
        server.put(SERVICES, service("llm", "two", model_label="two"))
        async with discovering(server, tmp_path, EMPTY, autodiscovery=True, namespaces=("llm", "team-a")) as (
            discovery,
            sink,
        ):
            await eventually(lambda: listed(discovery, 2), "both namespaces listed")
            assert set(sink.models) == {"two"}
        assert [
            line
            for line in all_logs
            if " WARNING " in line
            and "namespace team-a is watched but no SLUICEGATE_KUBERNETES_MODEL_NAMESPACES entry" in line
        ]

    run_with_apiserver(scenario, all_logs)


def listed(discovery: Discovery, namespaces: int) -> bool:
    watches = discovery.service_watches
    return len(watches) == namespaces and all(watch.in_sync for watch in watches.values())
