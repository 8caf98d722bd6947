"""The new-key page's agent snippets (gateway/agent_snippets.py), for the key just shown: its first
usable model and that model's context window as this replica knows it."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.agent_snippets import AgentSnippets, pick_model
from gateway.proxy.output_caps import context_window
from gateway.routing.router import Router


def for_key(router: Router, base: str, secret: str, allowed: Iterable[str] | None) -> AgentSnippets:
    routes = router.models()
    model, any_model = pick_model([(r.model.name, r.model.aliases) for r in routes], allowed)
    route = next((r for r in routes if model in (r.model.name, *r.model.aliases)), None)
    window = context_window(route) if route is not None else None
    return AgentSnippets(base, secret, model, None if window is None else str(window), any_model)
