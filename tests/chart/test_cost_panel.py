"""The dashboard's cost panels compute what they say: promtool evaluates the shipped expressions over
series shaped as two gateway replicas export them (each its own token counters, both the same price
gauge), and a team's cost is its tokens times each model's price, counted once, per currency."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.chart.test_monitoring import GRAFANA_VARIABLES, dashboard, promtool  # noqa: F401 -- fixture

# A model priced 0.15 / 0.60 per million tokens, one unpriced; pods a and b are gateway replicas.
SERIES = {
    'sluicegate_tokens_total{pod="a", model="m1", team="ml", type="prompt"}': "0+1000x120",
    'sluicegate_tokens_total{pod="b", model="m1", team="ml", type="prompt"}': "0+1000x120",
    'sluicegate_tokens_total{pod="a", model="m1", team="ml", type="completion"}': "0+100x120",
    'sluicegate_tokens_total{pod="a", model="free", team="ml", type="prompt"}': "0+5000x120",
    'sluicegate_tokens_total{pod="b", model="m1", team="web", type="completion"}': "0+10x120",
    **{
        f'sluicegate_model_price_per_token{{pod="{pod}", model="m1", type="{kind}", currency="EUR"}}': (
            f"{p}x120"
        )
        for pod in ("a", "b")
        for kind, p in (("prompt", "0.00000015"), ("completion", "0.0000006"))
    },
}
# Per hour (60 samples a minute apart): ml 2 x 60,000 prompt x 0.15e-6 + 6,000 completion x 0.6e-6;
# web 600 completion x 0.6e-6. The unpriced model adds nothing.
PER_HOUR = {"ml": 0.0216, "web": 0.00036}


def _cost_exprs() -> dict[str, str]:
    exprs = {}
    for panel in dashboard()["panels"]:
        if panel.get("title", "").startswith("Cost"):
            (target,) = panel["targets"]
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            exprs[panel["title"]] = expr.replace("[5m]", "[1h]")  # a rate over the whole input
    return exprs


def test_cost_panels_price_each_teams_tokens_once(promtool: str, tmp_path: Path) -> None:  # noqa: F811
    exprs = _cost_exprs()
    assert set(exprs) == {"Cost in range by team", "Cost per hour by team"}
    tests = []
    for expr in exprs.values():
        # Floats: compared within 1e-12 (1 when close, for that team only), not for equality.
        tests += [
            {
                "expr": f"abs(({expr}) - {cost}) < bool 1e-12",
                "eval_time": "120m",
                "exp_samples": [
                    {"labels": f'{{team="{other}", currency="EUR"}}', "value": int(other == team)}
                    for other in PER_HOUR
                ],
            }
            for team, cost in PER_HOUR.items()
        ]
    spec = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in SERIES.items()],
                "promql_expr_test": tests,
            }
        ],
    }
    path = tmp_path / "cost.yaml"
    path.write_text(yaml.safe_dump(spec))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
