"""A connect that fails for the gateway's own want of descriptors (EMFILE) passes no verdict on the
worker: neither a request's attempt (passive ejection) nor a health probe may take a healthy worker
out of service. Run in a child process whose descriptor limit the test sets (resource.setrlimit in
the child), every descriptor left taken; then the descriptors come back and the same worker, a real
one on a real socket, must serve at once."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.servers import run_uvicorn
from workers.fake.app import create_app as create_fake_worker

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, os, random, resource, sys
    from gateway.errors import GatewayError
    from gateway.model_table import HealthConfig, ModelConfig, ModelTable
    from gateway.observability.metrics import Metrics
    from gateway.proxy.whole_answer import read_whole
    from gateway.proxy.upstream import Upstream
    from gateway.worker.client import WorkerClient
    from gateway.routing.monitor import Monitor
    from gateway.routing.policy import RouteRequest
    from gateway.routing.router import Router

    async def main(url):
        health = HealthConfig(failures_to_eject=1, probe_interval=0.05)
        table = ModelTable((ModelConfig(name="m", endpoints=(url,), health=health),))
        router = Router(table, Metrics(), rng=random.Random(1))
        route = router.resolve("m")
        plan = router.plan(route)
        (endpoint,) = plan[0].endpoints
        session = WorkerClient()  # the monitor's
        upstream = Upstream(WorkerClient(), router, Metrics())
        monitor = Monitor(router, session, tick_s=0.01)
        loop = asyncio.get_running_loop()

        async def attempt():
            reply = await upstream.open(plan, "/v1/chat/completions", lambda pool: BODY, HEADERS,
                                        RouteRequest("m", team="t"), head_deadline=loop.time() + 10,
                                        stream=False)
            status = reply.response.status
            await read_whole(reply, deadline=loop.time() + 10, max_bytes=1 << 20)
            reply.release()
            return status

        assert await attempt() == 200  # the worker serves; its connection is kept alive
        await upstream.aclose()  # ... and closed: the next attempt must connect
        upstream = Upstream(WorkerClient(), router, Metrics())
        used = len(os.listdir("/proc/self/fd"))
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (used + 16, hard))
        held = []
        try:
            while True:  # every descriptor left, taken
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        refused = []
        for _ in range(3):
            try:
                await attempt()
            except GatewayError as exc:
                refused.append(exc.code.wire_code)
        probed_at = endpoint.last_probe_at
        monitor.start()
        while endpoint.last_probe_at - probed_at < 0.2:  # several probe rounds, each failing to connect
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)  # the last round's probe back
        await monitor.stop()
        during = {"usable": endpoint.usable, "probe_ok": endpoint.probe_ok}
        for fd in held:
            os.close(fd)
        after = await attempt()
        print(json.dumps({"refused": refused, "during": during, "after": after}))
        await upstream.aclose()
        await session.aclose()

    BODY = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}).encode()
    HEADERS = {"content-type": "application/json"}
    asyncio.run(main(sys.argv[1]))
    """
)


def test_the_gateways_own_descriptor_exhaustion_ejects_no_worker() -> None:
    with run_uvicorn(create_fake_worker(["fake-model"])) as worker:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, worker], capture_output=True, text=True, timeout=120, check=False
        )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # Every attempt while out of descriptors failed (the worker was never reached)...
    assert seen["refused"] == ["no_healthy_upstream"] * 3, seen
    # ... and neither those failures nor the failed probes judged the worker.
    assert seen["during"] == {"usable": True, "probe_ok": True}, seen
    assert seen["after"] == 200, seen
