"""The printed report: a table with PASS/MISS against targets, per-phase detail lines, warnings, JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.cpu import NOISE_CORES, Monitor
from harness.load import PhaseResult, percentile


def verdict(value: float, limit: float, op: str) -> str:
    if value != value:  # NaN
        return "n/a"
    ok = value <= limit if op == "<=" else value >= limit
    return "PASS" if ok else "MISS"


class Table:
    """Rows of cells under `header`: the first column left-aligned, the values right-aligned, the
    last two (target, result) left-aligned."""

    HEADER = ("metric", "value", "target", "result")

    def __init__(self, header: tuple[str, ...] = HEADER) -> None:
        self.header = header
        self.rows: list[tuple[str, ...]] = []

    def row(self, metric: str, *cells: str) -> None:
        padded = (metric, *cells, *([""] * (len(self.header) - 1 - len(cells))))
        assert len(padded) == len(self.header), padded
        self.rows.append(padded)

    def check(self, metric: str, value: float, shown: str, op: str, limit: float, limit_shown: str) -> None:
        """A row with a target: `value` (printed as `shown`) must be `op` ("<=" or ">=") `limit`."""
        self.row(metric, shown, f"{op} {limit_shown}", verdict(value, limit, op))

    def check_cells(
        self, metric: str, cells: list[str], value: float, op: str, limit: float, limit_shown: str
    ) -> None:
        """A row of several values, the target applying to `value`."""
        self.row(metric, *cells, f"{op} {limit_shown}", verdict(value, limit, op))

    def render(self) -> list[str]:
        rows = [self.header, *self.rows]
        n = len(self.header)
        widths = [max(len(r[i]) for r in rows) for i in range(n)]

        def fmt(r: tuple[str, ...]) -> str:
            cells = [
                r[i].ljust(widths[i]) if i == 0 or i >= n - 2 else r[i].rjust(widths[i]) for i in range(n)
            ]
            return "  ".join(cells).rstrip()

        return [fmt(self.header), "-" * (sum(widths) + 2 * (n - 1)), *(fmt(r) for r in self.rows)]


def phase_line(
    ph: PhaseResult, samples: list[float], name_width: int = 22, extra: str = "", server: str = "gateway"
) -> str:
    """`name n= rate p50 p90 p99 errors` in ms, then `extra`, then the `server`'s CPU per request."""
    return (
        f"  {ph.name:<{name_width}} n={len(samples):>6}  {ph.rps:>8,.0f} req/s  "
        f"p50={1000 * percentile(samples, 50):7.3f}  p90={1000 * percentile(samples, 90):7.3f}  "
        f"p99={1000 * percentile(samples, 99):7.3f}  errors={ph.errors}"
        + extra
        + (
            f"  {server} CPU {1000 * ph.cpu_s / ph.requests:.3f} ms/request"
            if ph.cpu_s is not None and ph.requests
            else ""
        )
    )


def disturbance(phases: list[PhaseResult], monitor: Monitor) -> tuple[list[str], list[str]]:
    """(detail lines: the CPU other processes used per phase and the time spent waiting for quiet;
    warnings: noisy phases and phases with errors)."""
    lines = [
        "  CPU used by other processes on this machine (not this benchmark's) per phase, in cores:",
        "    "
        + ", ".join(
            f"{ph.name} {ph.foreign_cpu_s / ph.wall_s:.2f}"
            + (f" (steal {ph.steal_s / ph.wall_s:.2f})" if ph.steal_s > 0.01 else "")
            for ph in phases
            if ph.wall_s
        ),
    ]
    if monitor.quiet_budget_s > 0:
        lines.append(
            f"  waited {monitor.waited_s:.1f} s in all for quiet moments (budget {monitor.quiet_budget_s:g} s"
            + (", used up)" if monitor.gave_up else ")")
        )
    notes = []
    noisy = [ph for ph in phases if ph.wall_s and ph.foreign_cpu_s / ph.wall_s > NOISE_CORES]
    if noisy:
        notes.append(
            "other processes used CPU during "
            + ", ".join(f"{ph.name} ({ph.foreign_cpu_s / ph.wall_s:.2f} cores)" for ph in noisy)
            + ": throughput and latency there are disturbed (CPU per request less so); "
            "rerun on a quiet machine"
        )
    for ph in phases:
        if ph.errors:
            notes.append(f"{ph.name}: {ph.errors} errors, e.g. {ph.error_samples[:2]}")
    return lines, notes


def compose(
    facts: list[str], table: Table, details: list[str], notes: list[str], *more: tuple[str, Table]
) -> list[str]:
    """The facts, the table, each (title, table) of `more`, the details and the warnings."""
    out = ["", *facts, "", *table.render()]
    for title, extra in more:
        out += ["", title, *extra.render()]
    out += ["", *details]
    if notes:
        out += ["", "warnings:", *(f"  ! {n}" for n in notes)]
    return out


def write_json(path: str | None, data: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(data, indent=2) + "\n")
