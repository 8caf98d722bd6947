"""SLUICEGATE_SCIM_TOKEN: short enough to guess stops the start, and the message never shows it."""

from __future__ import annotations

import pytest

from gateway.config import Settings
from gateway.errors import ConfigError


def test_a_short_scim_token_stops_the_start_without_showing_it() -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"SLUICEGATE_SCIM_TOKEN": "hunter2-short"})
    assert "SLUICEGATE_SCIM_TOKEN" in str(refused.value)
    assert "hunter2" not in str(refused.value)
    assert Settings.from_env({"SLUICEGATE_SCIM_TOKEN": "x" * 32}).scim_token == "x" * 32
    assert Settings.from_env({}).scim_token is None
