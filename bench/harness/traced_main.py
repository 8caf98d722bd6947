"""`python traced_main.py DIR FRAMES PYTHON -m MODULE ARGS...` (or `... PYTHON SCRIPT ARGS...`): runs
`python -m MODULE ARGS...` (or the script) in this process, starts tracemalloc (FRAMES frames a
trace) when the bench creates DIR/start.req, and then writes a snapshot whenever the bench asks for
one: it creates DIR/NAME.req, this writes DIR/NAME.snap (`Snapshot.dump`) and then removes the
request. Tracing from the start would make the imports take minutes (25 frames a trace); what is
allocated before the start is not traced, which a diff between two later snapshots does not need.
The bench's wrapper only (bench/streams_bench.py --tracemalloc, through `wrap=` of
`gateway_stack` and `start_bare_proxy`): the servers' own code knows nothing of it.

The snapshot is taken in a thread of its own: the server's event loop never runs bench code.
"""

from __future__ import annotations

import gc
import os
import runpy
import sys
import threading
import time
import tracemalloc
from pathlib import Path

POLL_S = 0.1


def _serve_snapshots(folder: Path, frames: int) -> None:
    while True:
        for request in sorted(folder.glob("*.req")):
            if request.stem == "start":
                tracemalloc.start(frames)
                request.unlink()
                continue
            gc.collect()  # what is still held, not what is garbage waiting for a collection
            target = request.with_suffix(".snap")
            tracemalloc.take_snapshot().dump(str(target.with_suffix(".tmp")))
            target.with_suffix(".tmp").rename(target)
            request.unlink()
        time.sleep(POLL_S)


def main() -> None:
    if len(sys.argv) < 5:
        raise SystemExit("usage: traced_main.py DIR FRAMES PYTHON (-m MODULE | SCRIPT) ARGS...")
    folder, frames, _python, *command = sys.argv[1:]
    threading.Thread(
        target=_serve_snapshots, args=(Path(folder), int(frames)), daemon=True, name="snapshots"
    ).start()
    # As python itself would: the working directory (-m) or the script's folder first on sys.path,
    # never this file's (bench/harness has modules named like the standard library's: profile).
    if command[0] == "-m":
        sys.path[0] = os.getcwd()
        sys.argv = [command[1], *command[2:]]
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(command[0]))
        sys.argv = command
        runpy.run_path(command[0], run_name="__main__")


if __name__ == "__main__":
    main()
