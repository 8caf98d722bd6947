"""Sluicegate: a gateway for self-hosted LLMs (keys, limits, metering, routing, SSE relay)."""

__version__ = "0.1.0"
