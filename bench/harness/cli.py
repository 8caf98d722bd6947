"""What every benchmark's command line shares: the common flags, and running to a printed report."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from harness.procs import Children, guarded
from harness.report import write_json


def parser(doc: str | None, quick_help: str) -> argparse.ArgumentParser:
    """A parser with --quick, --wait-quiet S and --json PATH."""
    out = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--quick", action="store_true", help=quick_help)
    out.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="before each phase wait for the machine to be quiet, at most S seconds over the run",
    )
    out.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    return out


def run_to_report(
    children: Children,
    hard_limit_s: float,
    work: Callable[[], tuple[str, dict[str, Any]]],
    plan: Any,
    json_path: str | None,
) -> int:
    """Runs `work` under the watchdog; prints its report and writes the plan + summary as JSON.
    Returns the exit status (130 when interrupted)."""
    done = guarded(children, int(hard_limit_s), work)
    if done is None:
        return 130
    text, summary = done
    print(text)
    write_json(json_path, {"plan": asdict(plan), **summary})
    return 0


def print_report(hard_limit_s: int, work: Callable[[Children], str]) -> int:
    """Runs `work` (given the run's children) under the watchdog and prints the report it returns;
    the exit status: 1 when it did not finish."""
    children = Children()
    text = guarded(children, hard_limit_s, lambda: work(children))
    if text is None:
        return 1
    print(text)
    return 0
