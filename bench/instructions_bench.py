"""Instructions per request: the gateway against the bare proxy, counted by callgrind.

Wall-clock CPU per request moves with whatever else the machine is doing; the number of
instructions a request executes does not. This bench runs the gateway (`python -m gateway serve`,
a key with every limit on) and the bare proxy (`bench/bare_proxy.py`) each under
`valgrind --tool=callgrind --instr-atstart=no`, warms each up, then switches instrumentation on
(`callgrind_control -i on`) for N sequential requests of each kind (non-stream chat, a 16-token
stream), off again, dumps, and reads the total instructions (Ir). Background timers that fire
during the requests are counted too (the gateway's repeat within a few %, the bare proxy's within
0.1 %). `--phases` then profiles the gateway (not under valgrind) with py-spy over sequential
requests and splits the gateway's instructions per request into phases (harness/phases.py).

    .venv/bin/python bench/instructions_bench.py              # about 4 min
    .venv/bin/python bench/instructions_bench.py -n 100       # fewer requests per kind
    .venv/bin/python bench/instructions_bench.py --phases     # + the per-phase table (py-spy)
    .venv/bin/python bench/instructions_bench.py --tracing    # the gateway with tracing off, on at
                                                              # 0%, the default ratio and 100%
    SLUICEGATE_BENCH_GATEWAY_SRC=/tmp/before .venv/bin/python bench/instructions_bench.py

The mock worker and Redis run natively; nothing is pinned (valgrind runs one thread at a time).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import cli
from harness.cpu import machine_facts
from harness.phases import PHASES, phase_shares
from harness.procs import Children, gateway_stack, start_announcing, start_bare_proxy
from harness.profile import find_py_spy
from tracing_bench import otlp_receiver

MOCK_WORKER = Path(__file__).resolve().parent / "mock_worker.py"
MODEL = "bench-model"
WARMUP = 60
VALGRIND = "/usr/bin/valgrind"
CALLGRIND_CONTROL = "/usr/bin/callgrind_control"
PHASE_REQUESTS = 3000  # per kind, sequential, py-spy at 1 kHz: a few thousand non-idle samples


def chat_body(stream: bool, tokens: int) -> bytes:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say something short about sluice gates."}],
        "max_tokens": tokens,
        "stream": stream,
    }
    return json.dumps(body).encode()


def request_kinds(tokens: int) -> dict[str, bytes]:
    return {"non-stream": chat_body(False, tokens), "stream": chat_body(True, tokens)}


def worker_argv(args: argparse.Namespace) -> list[str]:
    """The mock worker: `--tokens` deltas per answer, each stream delta `--token-delay-ms` after
    the last (paced, every event reaches the server in a read of its own, as from an engine)."""
    return [
        *(sys.executable, str(MOCK_WORKER), "--port", "0", "--tokens", str(args.tokens)),
        *("--token-delay-ms", str(args.token_delay_ms)),
    ]


class Client:
    """One keep-alive connection, one request at a time (http.client: no event loop to wake)."""

    def __init__(self, base: str, key: str | None) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=120)
        self.headers = {"content-type": "application/json"}
        if key:
            self.headers["authorization"] = f"Bearer {key}"

    def send(self, body: bytes) -> None:
        self.conn.request("POST", "/v1/chat/completions", body=body, headers=self.headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"status {response.status}: {data[:300]!r}")

    def close(self) -> None:
        self.conn.close()


def _control(pid: int, *args: str) -> None:
    subprocess.run([CALLGRIND_CONTROL, *args, str(pid)], check=True, capture_output=True, timeout=120)


def _dumped_total(out_dir: Path, before: set[Path]) -> int:
    """The Ir total of the dump callgrind just wrote (a new file in `out_dir`)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for path in sorted(set(out_dir.iterdir()) - before):
            if path.suffix == ".log":
                continue
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("totals:"):  # "summary:" can be 0 in a dump made on demand
                    return int(line.split()[1])
        time.sleep(0.2)
    raise RuntimeError(f"no callgrind dump appeared in {out_dir}")


def count(
    pid: int, out_dir: Path, client: Client, kinds: dict[str, bytes], n: int, settle_s: float
) -> dict[str, float]:
    """Instructions per request of each kind: warm-up, then instrumentation on for `n` requests."""
    result = {}
    for kind, body in kinds.items():
        for _ in range(WARMUP):
            client.send(body)
        time.sleep(settle_s)
        _control(pid, "-z")
        _control(pid, "-i", "on")
        for _ in range(n):
            client.send(body)
        time.sleep(settle_s)  # what runs after the last answer is sent (settling, the access log)
        _control(pid, "-i", "off")
        before = set(out_dir.iterdir())
        _control(pid, "-d")
        result[kind] = _dumped_total(out_dir, before) / n
    return result


def callgrind_wrap(out_dir: Path, name: str) -> tuple[str, ...]:
    return (
        VALGRIND,
        "--tool=callgrind",
        "--instr-atstart=no",
        "--dump-instr=no",
        f"--callgrind-out-file={out_dir / name}.%p",
        f"--log-file={out_dir / name}.%p.log",
    )


def tracing_modes(receiver: str) -> dict[str, dict[str, str]]:
    """The gateway's settings of each tracing mode: off, on with no request sampled (what a
    dropped request costs), the documented default sampler (only an endpoint set), and every
    request sampled."""
    return {
        "tracing off": {},
        "0% sampled": {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver, "SLUICEGATE_TRACE_SAMPLE_RATIO": "0"},
        "default ratio": {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver},
        "100% sampled": {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver, "OTEL_TRACES_SAMPLER": "always_on"},
    }


def run_tracing(args: argparse.Namespace, children: Children) -> str:
    """Instructions per request of the gateway in each tracing mode, spans exported to a local
    OTLP receiver (a thread of this process: its work is not counted)."""
    facts = machine_facts(sorted(os.sched_getaffinity(0)), "none (valgrind runs one thread at a time)")
    print("\n".join(facts), file=sys.stderr, flush=True)
    argv = worker_argv(args)
    kinds = request_kinds(args.tokens)
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sluicegate-ir-"))
    tmp.mkdir(parents=True, exist_ok=True)
    if not args.keep:
        children.temp_dirs.append(str(tmp))
    counts: dict[str, dict[str, float]] = {}
    with otlp_receiver() as (receiver, received):
        try:
            for mode, env in tracing_modes(receiver).items():
                children.step(f"gateway under callgrind, {mode}")
                out_dir = tmp / mode.replace(" ", "-").replace("%", "pct")
                out_dir.mkdir(exist_ok=True)
                port, _ = start_announcing(children, "mock worker", argv, None)
                models = {MODEL: f"http://127.0.0.1:{port}"}
                wrap = callgrind_wrap(out_dir, "gateway")
                with gateway_stack(children, models, None, None, wrap=wrap, timeout_s=300, env=env) as stack:
                    client = Client(stack.base, stack.limited_key)
                    counts[mode] = count(stack.gateway_pid, out_dir, client, kinds, args.n, args.settle_s)
                    client.close()
                children.stop_all()
        finally:
            if not args.keep:
                shutil.rmtree(tmp, ignore_errors=True)
    title = f"gateway instructions per request by tracing mode (callgrind, {args.n} sequential per kind)"
    lines = [*facts, "", title, f"  {'mode':<14} " + " ".join(f"{kind:>22}" for kind in kinds)]
    for mode, counted in counts.items():
        cells = []
        for kind in kinds:
            off = counts["tracing off"][kind]
            cells.append(f"{counted[kind] / 1e6:>8.3f} M ({counted[kind] / off - 1:+6.1%})")
        lines.append(f"  {mode:<14} " + " ".join(f"{cell:>22}" for cell in cells))
    lines.append(f"  receiver: {received.exports} OTLP exports, {received.bytes / 1024:.0f} KiB")
    return "\n".join(lines)


def run(args: argparse.Namespace, children: Children) -> str:
    if args.tracing:
        return run_tracing(args, children)
    facts = machine_facts(sorted(os.sched_getaffinity(0)), "none (valgrind runs one thread at a time)")
    print("\n".join(facts), file=sys.stderr, flush=True)
    argv = worker_argv(args)
    kinds = request_kinds(args.tokens)
    worker_port, _ = start_announcing(children, "mock worker", argv, None)
    worker = f"http://127.0.0.1:{worker_port}"
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sluicegate-ir-"))
    tmp.mkdir(parents=True, exist_ok=True)
    if not args.keep:
        children.temp_dirs.append(str(tmp))
    counts: dict[str, dict[str, float]] = {}
    try:
        children.step("bare proxy under callgrind")
        bare_dir = tmp / "bare"
        bare_dir.mkdir(exist_ok=True)
        wrap = callgrind_wrap(bare_dir, "bare")
        port, proc = start_bare_proxy(children, "bare proxy", worker, None, wrap=wrap, timeout_s=180)
        client = Client(f"http://127.0.0.1:{port}", None)
        counts["bare proxy"] = count(proc.pid, bare_dir, client, kinds, args.n, args.settle_s)
        client.close()
        children.stop_all()  # the mock worker too: the gateway's side starts its own
        children.step("gateway under callgrind")
        gw_dir = tmp / "gateway"
        gw_dir.mkdir(exist_ok=True)
        counts["gateway"], phases = _gateway(children, argv, kinds, gw_dir, args)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return report(facts, counts, phases, args)


def _gateway(
    children: Children,
    worker_cmd: list[str],
    kinds: dict[str, bytes],
    out_dir: Path,
    args: argparse.Namespace,
) -> tuple[dict[str, float], dict[str, dict[str, float]] | None]:
    port, _ = start_announcing(children, "mock worker", worker_cmd, None)
    models = {MODEL: f"http://127.0.0.1:{port}"}
    wrap = callgrind_wrap(out_dir, "gateway")
    with gateway_stack(children, models, None, None, wrap=wrap, timeout_s=300) as stack:
        client = Client(stack.base, stack.limited_key)
        counted = count(stack.gateway_pid, out_dir, client, kinds, args.n, args.settle_s)
        client.close()
    if not args.phases:
        return counted, None
    spy = find_py_spy()
    if spy is None:
        raise RuntimeError("--phases needs py-spy: .venv/bin/pip install py-spy")
    children.step("gateway under py-spy (phases)")
    port, _ = start_announcing(children, "mock worker", worker_cmd, None)
    models = {MODEL: f"http://127.0.0.1:{port}"}
    shares = {}
    with gateway_stack(children, models, None, None) as stack:
        client = Client(stack.base, stack.limited_key)
        for kind, body in kinds.items():
            shares[kind] = _profile(spy, stack.gateway_pid, out_dir / f"{kind}.txt", client, body)
        client.close()
    return counted, shares


def _profile(spy: str, pid: int, path: Path, client: Client, body: bytes) -> dict[str, float]:
    for _ in range(WARMUP):
        client.send(body)
    argv = [spy, "record", "--pid", str(pid), "--rate", "1000", "--nonblocking", "--format", "raw"]
    argv += ["--output", str(path)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)  # py-spy attaches
        for _ in range(PHASE_REQUESTS):
            client.send(body)
    finally:
        proc.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
        _, err = proc.communicate(timeout=60)
    if not path.exists():
        raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-500:]}")
    return phase_shares(path.read_text())


def report(
    facts: list[str],
    counts: dict[str, dict[str, float]],
    phases: dict[str, dict[str, float]] | None,
    args: argparse.Namespace,
) -> str:
    title = f"instructions per request (callgrind, {args.n} sequential requests per kind, after {WARMUP})"
    paced = f", {args.token_delay_ms:g} ms apart" if args.token_delay_ms else ""
    lines = [*facts, "", title, f"  (answers of {args.tokens} tokens{paced})"]
    kinds = list(counts["gateway"])  # in the order they were counted
    lines.append(f"  {'kind':<12} {'bare proxy':>12} {'gateway':>12} {'ratio':>7}")
    for kind in kinds:
        bare, gw = counts["bare proxy"][kind], counts["gateway"][kind]
        lines.append(f"  {kind:<12} {bare / 1e6:>10.3f} M {gw / 1e6:>10.3f} M {gw / bare:>6.2f}x")
    if phases:
        lines += ["", "gateway per phase (py-spy shares x callgrind instructions per request)"]
        lines.append(f"  {'phase':<28} " + " ".join(f"{kind:>20}" for kind in kinds))
        for phase in (*PHASES, "event loop and other"):
            cells = []
            for kind in kinds:
                share = phases[kind].get(phase, 0.0)
                cells.append(f"{share * counts['gateway'][kind] / 1e6:>8.3f} M ({share:5.1%})")
            lines.append(f"  {phase:<28} " + " ".join(f"{cell:>20}" for cell in cells))
        whole = " ".join(f"{counts['bare proxy'][kind] / 1e6:>8.3f} M {'':>9}" for kind in kinds)
        lines.append(f"  {'bare proxy, whole request':<28} {whole}")
        samples = " ".join(f"{int(phases[kind]['samples']):>20}" for kind in kinds)
        lines.append(f"  {'(py-spy samples)':<28} {samples}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=300, help="requests per kind while counting (300)")
    parser.add_argument("--phases", action="store_true", help="also the per-phase table (needs py-spy)")
    parser.add_argument(
        "--tracing", action="store_true", help="the gateway with tracing off, at 0%%, by default, at 100%%"
    )
    parser.add_argument("--tokens", type=int, default=16, help="tokens per answer (16)")
    parser.add_argument(
        "--token-delay-ms", type=float, default=0.0, help="a stream's pause before each delta (0)"
    )
    parser.add_argument("--keep", metavar="DIR", help="keep callgrind's dumps and py-spy's stacks in DIR")
    parser.add_argument(
        "--settle-s", type=float, default=0.5, help="pause after the last request before counting stops"
    )
    args = parser.parse_args(argv)
    return cli.print_report(3600, lambda children: run(args, children))


if __name__ == "__main__":
    sys.exit(main())
