"""`GET /v1/key/info` against `GET /v1/models` (the other authenticated read that touches no
limit): the cost of reading what remains (one no-writes script call) and the key's usage this month
(the meter's report: one SMEMBERS and one pipelined HGETALL per day with usage).

One gateway in process (uvicorn on a real socket), its own redis-server, the fake worker; a key
with a limit of every kind, its team with budgets, and N days of usage. Prints p50 and p99 per
route over sequential requests on one keep-alive connection.

    .venv/bin/python bench/key_info_bench.py              # a few seconds
    .venv/bin/python bench/key_info_bench.py --requests 2000
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.app import create_app
from gateway.cli import AdminClient
from gateway.config import Settings
from gateway.dev.embedded_redis import EmbeddedRedis
from tests.conftest import FAKE_MODEL, OTHER_MODEL, default_table
from tests.servers import listening_socket, run_uvicorn
from workers.fake.app import create_app as create_fake_worker


def _timed(host: str, port: int, path: str, key: str, n: int) -> list[float]:
    """A new connection per request: on a reused one every answer here waits ~40 ms (a delayed
    ACK against a split write, seen on /healthz too), which would hide what is measured."""
    out = []
    for _ in range(n):
        started = time.perf_counter()
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", path, headers={"authorization": f"Bearer {key}", "connection": "close"})
        response = conn.getresponse()
        response.read()
        conn.close()
        out.append(time.perf_counter() - started)
        assert response.status == 200, response.status
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    with (
        EmbeddedRedis() as redis,
        run_uvicorn(create_fake_worker([FAKE_MODEL, OTHER_MODEL])) as worker,
    ):
        sock = listening_socket()
        settings = Settings(
            redis_url=redis.url, admin_token="bench-token", host="127.0.0.1", port=sock.getsockname()[1]
        )
        with run_uvicorn(create_app(settings, default_table(worker)), sock=sock, settings=settings) as url:
            admin = AdminClient(url, "bench-token")
            admin.call("POST", "/admin/v1/teams", {"name": "bench", "daily_tokens": 10**9, "rpm": 10**6})
            key = admin.call(
                "POST",
                "/admin/v1/keys",
                {
                    "team": "bench",
                    "rpm": 10**6,
                    "tpm": 10**9,
                    "max_concurrency": 100,
                    "monthly_tokens": 10**9,
                    "model_limits": {FAKE_MODEL: {"rpm": 10**6}},
                },
            )
            parts = urlsplit(url)
            host, port = parts.hostname or "127.0.0.1", parts.port or 80
            body = json.dumps({"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}]})
            for _ in range(20):  # usage for the report to read
                conn = http.client.HTTPConnection(host, port, timeout=10)
                conn.request(
                    "POST",
                    "/v1/chat/completions",
                    body=body,
                    headers={"authorization": f"Bearer {key['key']}"},
                )
                conn.getresponse().read()
                conn.close()
            _timed(host, port, "/v1/key/info", key["key"], 50)  # warm up
            for path in ("/v1/models", "/v1/key/info"):
                samples = sorted(_timed(host, port, path, key["key"], args.requests))
                p50 = statistics.median(samples) * 1000
                p99 = samples[int(len(samples) * 0.99) - 1] * 1000
                print(f"{path:14s} n={len(samples)}  p50 {p50:.2f} ms  p99 {p99:.2f} ms")


if __name__ == "__main__":
    main()
