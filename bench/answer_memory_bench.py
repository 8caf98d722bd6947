"""Peak memory of a gateway replica holding several large whole answers at once.

One whole answer is bounded (64 MiB), and since issue 40 so are all of them together
(SLUICEGATE_MAX_BUFFERED_ANSWER_BYTES, 128 MiB; past it a 503 `server_busy`). This starts a
throwaway Redis, the mock worker answering every non-stream request with a ~60 MB chat answer, and
the gateway; after one warm-up request it resets the gateway's peak RSS (VmHWM, through
/proc/<pid>/clear_refs), sends `--concurrent` requests at once, and prints the gateway's RSS
before, its peak during, and what each request got.

    .venv/bin/python bench/answer_memory_bench.py                        # 6 answers of 60 MB
    .venv/bin/python bench/answer_memory_bench.py --concurrent 8 --answer-mb 40
    SLUICEGATE_BENCH_GATEWAY_SRC=/path/to/other/checkout .venv/bin/python bench/answer_memory_bench.py

Needs redis-server on PATH, and root or the gateway's own user for clear_refs (without it the peak
is the process's whole life, warm-up included, and says so).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.cpu import memory_kib
from harness.procs import Children, gateway_stack, guarded, start_announcing

MOCK_WORKER = Path(__file__).resolve().parent / "mock_worker.py"
MODEL = "bench-model"


def _ask(base: str, key: str) -> tuple[int, int]:
    """(status, body bytes) of one whole chat request."""
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "big"}]}).encode()
    request = urllib.request.Request(f"{base}/v1/chat/completions", data=body, method="POST")  # noqa: S310
    request.add_header("content-type", "application/json")
    request.add_header("authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310 -- loopback
            return response.status, len(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, len(error.read())


def _reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def run(concurrent: int, answer_mb: int) -> None:
    children = Children()

    def work() -> None:
        argv = [sys.executable, str(MOCK_WORKER), "--port", "0", "--whole-bytes", str(answer_mb * 1_000_000)]
        port, _ = start_announcing(children, "mock worker", argv, None)
        with gateway_stack(children, {MODEL: f"http://127.0.0.1:{port}"}, None, None) as stack:
            pid = stack.gateway_pid
            children.step("warm-up: one answer")
            print(f"warm-up: HTTP {_ask(stack.base, stack.api_key)[0]}", file=sys.stderr)
            time.sleep(1.0)  # the warm-up's buffers freed
            before = memory_kib(pid)["VmRSS"]
            reset = _reset_peak(pid)
            children.step(f"{concurrent} answers of {answer_mb} MB at once")
            with ThreadPoolExecutor(concurrent) as pool:
                results = list(pool.map(lambda _: _ask(stack.base, stack.api_key), range(concurrent)))
            peak = memory_kib(pid)["VmHWM"]
            statuses = collections.Counter(status for status, _ in results)
            print(f"gateway: {stack.base}  answers: {concurrent} x {answer_mb} MB at once")
            print(f"statuses: {dict(sorted(statuses.items()))}")
            print(f"RSS before: {before / 1024:.0f} MiB")
            print(f"peak RSS:   {peak / 1024:.0f} MiB{'' if reset else ' (not reset: the whole life)'}")
            print(f"added:      {(peak - before) / 1024:.0f} MiB")

    guarded(children, 600, work)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrent", type=int, default=6)
    parser.add_argument(
        "--answer-mb", type=int, default=60, help="each answer's size (at most 64: the gateway's cap)"
    )
    args = parser.parse_args()
    run(args.concurrent, args.answer_mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
