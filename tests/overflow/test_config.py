"""The model file's `overflow` section: its shape, and each bad value refused naming its field;
the team's and key's `overflow` choice."""

from __future__ import annotations

import copy
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.errors import ConfigError, GatewayError
from gateway.limits.spec import LimitSet, overflow_allowed, parse_limits
from gateway.model_file import parse_model_table

MODEL: dict[str, Any] = {
    "name": "llama-70b",
    "endpoints": [{"url": "http://10.0.0.1:8000"}],
    "price": {"input_per_million": "0.20", "output_per_million": "0.80"},
    "overflow": {
        "after_ms": 3000,
        "max_concurrency": 32,
        "providers": [
            {
                "name": "cloud",
                "url": "https://api.provider.example/v1",
                "model": "provider-model-name",
                "key_env": "CLOUD_API_KEY",
                "ca_file": "/etc/ssl/provider-ca.pem",
                "price": {"input_per_million": "3.00", "output_per_million": "15.00"},
            }
        ],
    },
}


def _with(path: str, value: Any) -> dict[str, Any]:
    """MODEL with the field at `path` (dots; list indexes as numbers) set, or removed when None."""
    model = copy.deepcopy(MODEL)
    *parents, last = path.split(".")
    node: Any = model
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return {"models": [model]}


def test_the_issue_shape_parses() -> None:
    overflow = parse_model_table({"models": [MODEL]}).models[0].overflow
    assert overflow is not None
    assert (overflow.after_ms, overflow.max_concurrency) == (3000, 32)
    (provider,) = overflow.providers
    assert provider.url == "https://api.provider.example/v1"
    assert provider.model == "provider-model-name"
    assert provider.key_env == "CLOUD_API_KEY"
    assert provider.key_file is None
    assert provider.ca_file == "/etc/ssl/provider-ca.pem"
    assert provider.price.output_per_million == Decimal("15.00")


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("overflow.providers.0.key_env", None, "models[0].overflow.providers[0].key_env"),
        ("overflow.providers.0.url", "http://api.provider.example/v1", "models[0].overflow.providers[0].url"),
        ("overflow.providers.0.url", "ftp://x/v1", "models[0].overflow.providers[0].url"),
        # It becomes the request line: a space or a line break would be a header of its own.
        ("overflow.providers.0.url", "https://h.example/v1 X", "models[0].overflow.providers[0].url"),
        ("overflow.providers.0.url", "https://h.example/v1\r\nX-A: b", "models[0].overflow.providers[0].url"),
        ("overflow.providers.0.price", None, "models[0].overflow.providers[0].price"),
        (
            "overflow.providers.0.price",
            {"input_per_million": "abc", "output_per_million": "1"},
            "models[0].overflow.providers[0].price.input_per_million",
        ),
        (
            "overflow.providers.0.price",
            {"input_per_million": "1", "output_per_million": "1", "currency": "EUR"},
            "models[0].overflow.providers[0].price.currency",
        ),
        ("overflow.providers.0.name", "Cloud!", "models[0].overflow.providers[0].name"),
        ("overflow.providers.0.verify", False, "models[0].overflow.providers[0].verify"),
        ("overflow.max_concurrency", 0, "models[0].overflow.max_concurrency"),
        ("overflow.after_ms", "3s", "models[0].overflow.after_ms"),
        ("overflow.providers", [], "models[0].overflow.providers"),
    ],
)
def test_bad_values_name_their_field(path: str, value: Any, field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_model_table(_with(path, value))
    assert str(raised.value).startswith(field + ":"), str(raised.value)


def test_both_key_sources_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"providers\[0\]\.key_env: give exactly one"):
        parse_model_table(_with("overflow.providers.0.key_file", "/run/secrets/key"))


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_plain_http_only_to_loopback(host: str) -> None:
    table = parse_model_table(_with("overflow.providers.0.url", f"http://{host}:9000/v1"))
    assert table.models[0].overflow is not None


def test_check_config_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(_with("overflow.providers.0.url", "http://api.example.com/v1")))
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "models[0].overflow.providers[0].url" in done.stderr + done.stdout


def test_teams_allow_and_keys_deny() -> None:
    allowed = parse_limits({"overflow": "allowed"}, budgets=True)
    assert allowed.as_dict() == {"overflow": "allowed"}
    assert LimitSet.from_json(allowed.to_json()).overflow == "allowed"
    denied = parse_limits({"overflow": "denied"}, budgets=False)
    assert overflow_allowed(allowed, LimitSet())
    assert not overflow_allowed(allowed, denied)
    assert not overflow_allowed(LimitSet(), LimitSet())  # denied by default
    assert not overflow_allowed(LimitSet(), parse_limits({"overflow": "allowed"}, budgets=False))
    assert allowed.merged(LimitSet(), {"overflow"}).overflow is None
    with pytest.raises(GatewayError) as raised:
        parse_limits({"overflow": "yes"}, budgets=True)
    assert raised.value.param == "overflow"


def test_the_cli_sets_a_team_and_a_key() -> None:
    from gateway.cli.flags import limits_of
    from gateway.cli.main import build_parser

    parser = build_parser()
    team = parser.parse_args(["teams", "update", "ml", "--overflow", "allowed"])
    key = parser.parse_args(["keys", "update", "key_0123456789abcdef", "--overflow", "denied"])
    assert limits_of(team)["overflow"] == "allowed"
    assert limits_of(key)["overflow"] == "denied"
    cleared = parser.parse_args(["teams", "update", "ml", "--clear", "overflow"])
    assert limits_of(cleared)["clear"] == ["overflow"]


def test_a_key_or_ca_that_cannot_be_read_stops_the_start(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from gateway.observability.metrics import Metrics
    from gateway.overflow.providers import Overflow

    table = parse_model_table({"models": [MODEL]})
    with pytest.raises(
        ConfigError, match=r"^models\[0\]\.overflow\.providers\[0\]\.key_env: .*CLOUD_API_KEY"
    ):
        Overflow(table, Metrics(CollectorRegistry()), environ={})
    with pytest.raises(ConfigError, match=r"^models\[0\]\.overflow\.providers\[0\]\.ca_file: "):
        Overflow(table, Metrics(CollectorRegistry()), environ={"CLOUD_API_KEY": "sk-x"})
    empty = tmp_path / "key"
    empty.write_text("\n")
    raw = _with("overflow.providers.0.key_env", None)
    raw["models"][0]["overflow"]["providers"][0]["key_file"] = str(empty)
    del raw["models"][0]["overflow"]["providers"][0]["ca_file"]
    with pytest.raises(ConfigError, match=r"providers\[0\]\.key_file: the file is empty"):
        Overflow(parse_model_table(raw), Metrics(CollectorRegistry()), environ={})
    empty.write_text("sk-secret-value\n")
    overflow = Overflow(parse_model_table(raw), Metrics(CollectorRegistry()), environ={}).of("llama-70b")
    assert overflow is not None
    (provider,) = overflow.providers
    assert provider.headers()["authorization"] == "Bearer sk-secret-value"
    assert "sk-secret-value" not in repr(provider)
    # Admission's ceiling: the higher of the model's and the provider's prices, per token kind.
    assert (overflow.ceiling.input_per_million, overflow.ceiling.output_per_million) == (
        Decimal("3.00"),
        Decimal("15.00"),
    )
