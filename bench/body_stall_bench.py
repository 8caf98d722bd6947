"""`/healthz` latency while clients send bodies built to stall the event loop.

The fourth review's attack: 8.7 MB Messages bodies of 240,000 tiny messages, and Gemini bodies of
100,001 `contents`, each refused in the end, but only after orjson had parsed them on the loop
(0.15-0.7 s each): every other request of the replica, `/healthz` included, waited that long.
Since issue 40 such a body is refused from an estimate of its JSON values made on its bytes before
the parse (SLUICEGATE_MAX_BODY_VALUES, a 413).

This starts a throwaway Redis, the mock worker and the gateway, probes `GET /healthz` every 20 ms
on one kept-alive connection, first quietly, then while `--attackers` clients send the two bodies
in turn as fast as they are answered, and prints the probes' latencies in each phase, what the
attack requests got and the gateway's CPU seconds.

    .venv/bin/python bench/body_stall_bench.py
    SLUICEGATE_BENCH_GATEWAY_SRC=/path/to/other/checkout .venv/bin/python bench/body_stall_bench.py

Needs redis-server on PATH. On a shared machine the quiet phase says how noisy it is.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from harness.cpu import cpu_seconds
from harness.procs import Children, gateway_stack, guarded, start_announcing

MOCK_WORKER = Path(__file__).resolve().parent / "mock_worker.py"
MODEL = "bench-model"
PROBE_EVERY_S = 0.02


def _bodies() -> list[tuple[str, bytes]]:
    messages = [{"role": "user", "content": "x"}] * 240_000
    contents = [{"role": "user", "parts": [{"text": "x"}]}] * 100_001
    return [
        ("/v1/messages", json.dumps({"model": MODEL, "max_tokens": 5, "messages": messages}).encode()),
        (f"/v1beta/models/{MODEL}:generateContent", json.dumps({"contents": contents}).encode()),
    ]


def _probe(base: str, stop: threading.Event, latencies: list[float]) -> None:
    host = urlsplit(base)
    conn = http.client.HTTPConnection(host.hostname or "127.0.0.1", host.port, timeout=30)
    try:
        while not stop.is_set():
            started = time.perf_counter()
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            latencies.append(time.perf_counter() - started)
            time.sleep(PROBE_EVERY_S)
    finally:
        conn.close()


def _attack(
    base: str,
    key: str,
    bodies: list[tuple[str, bytes]],
    stop: threading.Event,
    seen: collections.Counter[str],
) -> None:
    host = urlsplit(base)
    while not stop.is_set():
        for path, body in bodies:
            conn = http.client.HTTPConnection(host.hostname or "127.0.0.1", host.port, timeout=60)
            try:
                headers = {
                    "content-type": "application/json",
                    "authorization": f"Bearer {key}",
                    "x-goog-api-key": key,
                }
                conn.request("POST", path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                seen[f"{path.split(':')[-1].rsplit('/', 1)[-1]} {response.status}"] += 1
            except (OSError, http.client.HTTPException) as error:
                seen[f"error {type(error).__name__}"] += 1
            finally:
                conn.close()


def _phase(
    base: str, seconds: float, attack: tuple[int, str, list[tuple[str, bytes]]] | None
) -> tuple[list[float], collections.Counter[str]]:
    stop = threading.Event()
    latencies: list[float] = []
    seen: collections.Counter[str] = collections.Counter()
    threads = [threading.Thread(target=_probe, args=(base, stop, latencies))]
    if attack is not None:
        count, key, bodies = attack
        threads += [
            threading.Thread(target=_attack, args=(base, key, bodies, stop, seen)) for _ in range(count)
        ]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(120)
    return latencies, seen


def _line(name: str, latencies: list[float]) -> str:
    ms = sorted(x * 1000 for x in latencies)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"{name:<8} {len(ms):>7} {statistics.median(ms):>8.1f} {p99:>8.1f} {ms[-1]:>8.1f}"


def run(seconds: float, attackers: int) -> None:
    children = Children()
    bodies = _bodies()

    def work() -> None:
        port, _ = start_announcing(
            children, "mock worker", [sys.executable, str(MOCK_WORKER), "--port", "0"], None
        )
        with gateway_stack(children, {MODEL: f"http://127.0.0.1:{port}"}, None, None) as stack:
            children.step(f"quiet: /healthz every {PROBE_EVERY_S * 1000:.0f} ms for {seconds:.0f} s")
            quiet, _ = _phase(stack.base, seconds, None)
            children.step(f"attack: {attackers} clients sending the two bodies for {seconds:.0f} s")
            cpu = cpu_seconds(stack.gateway_pid)
            attacked, seen = _phase(stack.base, seconds, (attackers, stack.api_key, bodies))
            cpu = cpu_seconds(stack.gateway_pid) - cpu
            sizes = ", ".join(f"{path.rsplit('/', 1)[-1]} {len(body) / 1e6:.1f} MB" for path, body in bodies)
            print(f"gateway: {stack.base}  attack bodies: {sizes}")
            print(f"{'/healthz':<8} {'probes':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
            print(_line("quiet", quiet))
            print(_line("attack", attacked))
            print(f"attack requests: {dict(sorted(seen.items()))}; gateway CPU in the attack: {cpu:.1f} s")

    guarded(children, 600, work)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--attackers", type=int, default=2)
    args = parser.parse_args()
    run(args.seconds, args.attackers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
