"""The chart's alert on a team's monthly money budget, run by promtool's rule unit tests against
the rendered PrometheusRule: it fires once per team past 80 %, whether one replica exports the
gauge (the lease holder) or two do for a moment while the lease changes hands."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.chart.conftest import NAMESPACE, Renderer, rendered
from tests.chart.test_monitoring import MONITORING, dashboard, promtool

__all__ = ["promtool"]  # the session fixture, used below by name

ALERT = "SluicegateTeamMoneyBudgetHigh"


def _series(pod: str, team: str, values: str) -> dict[str, str]:
    labels = f'namespace="{NAMESPACE}", pod="{pod}", team="{team}"'
    return {"series": f"sluicegate_team_monthly_cost_budget_used_ratio{{{labels}}}", "values": values}


def test_the_money_budget_alert_fires_once_per_team_past_80_percent(
    render: Renderer, promtool: str, tmp_path: Path
) -> None:
    rule = rendered(render, values=MONITORING).one("PrometheusRule")
    (alert,) = [r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == ALERT]
    assert "sluicegate_team_monthly_cost_budget_used_ratio" in alert["expr"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    _series("gw-a", "ml", "0.5 0.85 0.9"),  # the holder: ml goes past 80 %
                    _series("gw-b", "ml", "_ 0.85 _"),  # a hand-over: both export for a moment
                    _series("gw-a", "web", "0.79 0.79 0.79"),  # under: no alert
                ],
                "alert_rule_test": [
                    {"eval_time": "0m", "alertname": ALERT, "exp_alerts": []},
                    {
                        "eval_time": "1m",
                        "alertname": ALERT,
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "team": "ml"},
                                "exp_annotations": {
                                    "summary": "Team ml has spent 85% of its monthly money budget",
                                    "description": alert["annotations"]["description"],
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    done = subprocess.run(
        [promtool, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_dashboard_shows_each_team_spent_and_forecast_once() -> None:
    (panel,) = [p for p in dashboard()["panels"] if p["title"] == "Monthly money budget used by team"]
    spent, forecast = (t["expr"] for t in panel["targets"])
    # `max by (team)`: a lease's hand-over, when two replicas export for a moment, is still one bar.
    assert spent.startswith("max by (team) (sluicegate_team_monthly_cost_budget_used_ratio")
    assert forecast.startswith(spent)
    assert "days_in_month()" in forecast
