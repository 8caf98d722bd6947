"""`sluicegate pools` (issue 37): the real CLI against a real gateway shows each model's pools and
endpoints as the replica that answered sees them, and why an ejected endpoint is out and until when.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import socket
from pathlib import Path

from gateway.cli import pools_cmds
from gateway.model_table import HealthConfig, ModelConfig, ModelTable, Timeouts
from tests.cli import cli_env, run_cli
from tests.conftest import GatewayFactory
from tests.routing.conftest import chat
from tests.routing.worker import ProgrammableWorker
from tests.servers import run_uvicorn
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
FAST = Timeouts(connect=2, first_token=2, idle=4, total=2)
# One probe at start, then none for the test's life: only request failures change the state.
HEALTH = HealthConfig(failures_to_eject=2, ejection_base=30, ejection_max=60, probe_interval=3600)


def _pools(url: str, token: str, *args: str) -> str:
    done = run_cli(cli_env(url, SLUICEGATE_ADMIN_TOKEN=token), "pools", *args, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_pools_names_the_replica_and_says_why_an_endpoint_is_out_until_when(
    make_gateway: GatewayFactory, fake_worker: str
) -> None:
    doomed = ProgrammableWorker()
    with contextlib.ExitStack() as running:
        dead_url = running.enter_context(run_uvicorn(doomed.app()))
        table = ModelTable(
            (
                ModelConfig(name="m", endpoints=(dead_url,), timeouts=FAST, health=HEALTH),
                ModelConfig(name="fine", upstream_model="fake-model", endpoints=(fake_worker,)),
            )
        )
        with make_gateway(table) as gw:
            key = gw.new_key()["key"]
            wait_until(lambda: doomed.health_probes >= 1, 5, "the gateway probed the worker at start")
            running.close()  # connecting is refused from now on: failures no request causes
            for _ in range(HEALTH.failures_to_eject):
                chat(gw, key)
            answer = json.loads(_pools(gw.url, gw.admin_token, "--json"))
            assert answer["replica"] == socket.gethostname()
            by_name = {m["name"]: m for m in answer["data"]}
            (out,) = by_name["m"]["pools"][0]["endpoints"]
            assert out["state"] == "ejected"
            assert "2 failures in a row" in out["ejected_because"], out
            assert "unreachable" in out["ejected_because"], out
            until = dt.datetime.fromisoformat(out["ejected_until"])
            assert 0 < (until - dt.datetime.now(dt.UTC)).total_seconds() <= HEALTH.ejection_base + 1
            (fine,) = by_name["fine"]["pools"][0]["endpoints"]
            assert (fine["state"], fine["ejected_because"], fine["ejected_until"]) == ("healthy", None, None)

            shown = _pools(gw.url, gw.admin_token)
            assert shown.startswith(f"as replica {socket.gethostname()} sees them"), shown
            header, *rows = shown.splitlines()[1:]
            assert header.split() == pools_cmds.COLUMNS
            (ejected,) = [r for r in rows if dead_url in r]
            assert "ejected" in ejected
            assert f"until {out['ejected_until']}" in ejected
            assert any(fake_worker in r and " healthy " in r for r in rows), shown
            only = _pools(gw.url, gw.admin_token, "--model", "fine")
            assert dead_url not in only
            assert fake_worker in only
