"""Capture the request bodies each pinned coding agent sends, as golden files.

    .venv/bin/python tools/agents/capture.py [claude codex opencode ...]

Runs every agent once, straight against a recording fake worker (no gateway: what the agent itself
sends; Gemini CLI, whose API no worker speaks, against a recording gateway in front of it), through
the scripted conversation of tests/agents (a plain turn, a tool round trip, a continued turn;
workers/fake/agent_turns.py plays the model), and writes each POST to
tests/agents/golden/<agent>[-<variant>]-<version>-<turn>.json: {"method", "path", "headers" (names
only), "body"}, where every string longer than 40 characters is replaced by a same-length
placeholder: the structure, field names, tool names and roles stay, the vendors' prompt text does
not. A failing agent run still leaves the bodies it sent; the script says which run failed.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from starlette.types import ASGIApp, Message, Receive, Scope, Send  # noqa: E402

from gateway.app import create_app as create_gateway  # noqa: E402
from gateway.cli import AdminClient  # noqa: E402
from gateway.config import Settings  # noqa: E402
from gateway.dev.embedded_redis import EmbeddedRedis  # noqa: E402
from gateway.model_table import ModelConfig, ModelTable  # noqa: E402
from tests.agents.agents import Target, make_agent  # noqa: E402
from tests.agents.script import conversation  # noqa: E402
from tests.servers import run_uvicorn  # noqa: E402
from workers.fake.app import create_app  # noqa: E402

GOLDEN = ROOT / "tests" / "agents" / "golden"
KEEP_CHARS = 40
PLACEHOLDER = "x"
# The model names the fake answers to: each agent's own default names go through too, as a
# gateway's aliases would serve them.
MODEL = "fake-model"
RUNS = [("claude", ""), ("codex", ""), ("opencode", "openai"), ("opencode", "anthropic"), ("gemini", "")]
# Agents whose API only the gateway serves (by translation): recorded in front of a gateway.
THROUGH_GATEWAY = frozenset({"gemini"})


def redact(value: Any) -> Any:
    """`value` with every string longer than KEEP_CHARS replaced by a same-length placeholder."""
    if isinstance(value, str):
        return value if len(value) <= KEEP_CHARS else PLACEHOLDER * len(value)
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, dict):
        return {key: redact(item) for key, item in value.items()}
    return value


class Recorder:
    """ASGI middleware keeping every POST's path, header names and JSON body, in order."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        names = sorted({name.decode().lower() for name, _ in scope["headers"]})
        self.requests.append({"method": "POST", "path": scope["path"], "headers": names, "body": body})
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        await self.app(scope, replay, send)


@contextlib.contextmanager
def recorded_gateway() -> Iterator[tuple[Recorder, str, str]]:
    """A gateway (its own Redis, the fake worker behind it serving MODEL), recorded in front;
    (the recorder, its URL, a key)."""
    admin_token = "adm-" + secrets.token_urlsafe(24)
    with (
        EmbeddedRedis() as redis,
        run_uvicorn(create_app([MODEL])) as worker,
        tempfile.TemporaryDirectory(prefix="capture-spool-") as spool,
    ):
        settings = Settings(redis_url=redis.url, admin_token=admin_token, spool_path=f"{spool}/spool")
        table = ModelTable((ModelConfig(name=MODEL, endpoints=(worker,)),))
        recorder = Recorder(create_gateway(settings, table))
        with run_uvicorn(recorder, settings=settings) as url:
            admin = AdminClient(url, admin_token)
            admin.call("POST", "/admin/v1/teams", {"name": "capture"})
            key: str = admin.call("POST", "/admin/v1/keys", {"team": "capture"})["key"]
            yield recorder, url, key


@contextlib.contextmanager
def recorded(name: str) -> Iterator[tuple[Recorder, str, str]]:
    if name in THROUGH_GATEWAY:
        with recorded_gateway() as found:
            yield found
        return
    recorder = Recorder(create_app([MODEL]))
    with run_uvicorn(recorder) as url:
        yield recorder, url, "sk-capture"


def capture(name: str, variant: str) -> list[str]:
    problems: list[str] = []
    with (
        recorded(name) as (recorder, url, key),
        tempfile.TemporaryDirectory(prefix=f"capture-{name}-") as scratch,
    ):
        agent = make_agent(name, Target(url, key, MODEL), Path(scratch), variant)
        stem = f"{name}{'-' + variant if variant else ''}-{agent.version}"
        for turn in conversation(agent.workdir):
            before = len(recorder.requests)
            result = agent.run(turn.prompt, resume=turn.resume)
            if result.returncode != 0:
                problems.append(f"{stem} {turn.name}: {result.describe()}")
            for i, request in enumerate(recorder.requests[before:], 1):
                path = GOLDEN / f"{stem}-{turn.name}-{i}.json"
                path.write_text(json.dumps({**request, "body": redact(request["body"])}, indent=1) + "\n")
                print(f"wrote {path.relative_to(ROOT)}")
    return problems


def main(argv: list[str]) -> int:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    chosen = [(n, v) for n, v in RUNS if not argv or n in argv]
    problems = [p for name, variant in chosen for p in capture(name, variant)]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
