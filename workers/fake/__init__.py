"""Deterministic OpenAI-compatible fake worker; see `workers.fake.app` for its behaviour."""

from workers.fake.app import create_app

__all__ = ["create_app"]
