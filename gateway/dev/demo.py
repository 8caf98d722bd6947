"""`sluicegate demo`: a local Redis, a demo worker and the gateway, with a team and key ready.

Everything runs on loopback and stops together on Ctrl-C, the way `sluicegate serve` stops
(gateway/edge/draining.py): an open stream ends with its error event and `[DONE]` and is metered,
then the worker and Redis stop. They run in process groups of their own, so the terminal's Ctrl-C
reaches the gateway alone and they outlive its drain. Nothing is written outside a temp dir,
unless `--state DIR` asks to keep Redis's data and the secrets across restarts (demo_state.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import uvicorn

from gateway.agent_snippets import AgentSnippets
from gateway.config import Settings
from gateway.dev import demo_state
from gateway.dev.embedded_redis import EmbeddedRedis, RedisNotInstalledError
from gateway.errors import ConfigError
from gateway.identity.principal import SYSTEM
from gateway.keys.store import KeyNotFoundError, KeyStore, TeamExistsError
from gateway.limits.spec import LimitSet
from gateway.model_table import NATIVE, ModelConfig, ModelTable, Protocols
from gateway.redis.client import close_redis, plain_client
from gateway.redis.url import validate_redis_url
from workers.fake.app import MAX_MODEL_LEN

DEMO_MODEL = "demo-model"
# The same worker, with the Messages and Responses APIs passed through natively (no translation):
# stored responses, previous_response_id and count_tokens on the worker's /tokenize.
DEMO_NATIVE_MODEL = "demo-native"
# Ctrl-C: open requests get this long, then the rest end with their API's error event.
DEMO_DRAIN_S = 2.0
DEMO_TEAM = "demo"
# A limit the examples never reach, there so that every answer shows the x-ratelimit-* headers.
DEMO_RPM = 600
_HELLO = '[{"role": "user", "content": "Hello!"}]'


def _port_is_free(host: str, port: int) -> bool:
    """Whether the gateway can listen there. SO_REUSEADDR as uvicorn binds with it: connections of
    a demo stopped a moment ago, still in TIME_WAIT, do not make the port busy."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 -- loopback http
            return bool(response.status == 200)
    except OSError:
        return False


def _start_worker(port: int) -> subprocess.Popen[bytes]:
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workers.fake",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--model",
            DEMO_MODEL,
            "--model",
            DEMO_NATIVE_MODEL,
        ],
        process_group=0,  # not the terminal's: Ctrl-C is the gateway's to handle (module docstring)
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError("the demo worker exited at start")
        if _healthy(f"http://127.0.0.1:{port}/health"):
            return worker
        time.sleep(0.1)
    worker.kill()
    raise RuntimeError("the demo worker did not become healthy in 20 s")


async def _create_demo_key(redis_url: str, kept: demo_state.DemoSecrets) -> tuple[str, str]:
    """The kept key when Redis still has it working (`--state`), else a new one."""
    redis = plain_client(redis_url)
    try:
        store = KeyStore(redis)
        if kept.key_id and kept.key:
            with contextlib.suppress(KeyNotFoundError):
                if (await store.key(kept.key_id)).refusal(time.time()) is None:
                    return kept.key_id, kept.key
        with contextlib.suppress(TeamExistsError):  # a Redis of yours, used by a demo before
            await store.create_team(DEMO_TEAM)
        record, secret = await store.create_key(
            DEMO_TEAM, name="demo key", limits=LimitSet(rpm=DEMO_RPM), created_by=SYSTEM.actor()
        )
        return record.id, secret
    finally:
        await close_redis(redis)


def _cli() -> str:
    """The admin CLI as this shell can run it: the venv's own script, whether or not it is active."""
    script = os.path.join(os.path.dirname(sys.executable), "sluicegate")
    return script if os.path.exists(script) else f"{sys.executable} -m gateway"


def _banner(
    base: str,
    redis: str,
    worker_url: str,
    key: str,
    key_id: str,
    admin: str,
    *,
    embedded: bool,
    state: str | None = None,
) -> str:
    kept = f"embedded, kept in {state}" if state else "embedded, in memory only"
    where = f"({kept})" if embedded else "(SLUICEGATE_REDIS_URL)"
    cli = _cli()
    # The demo key may use every model; the demo's first is the one its snippets name.
    agents = AgentSnippets(base, key, DEMO_MODEL, str(MAX_MODEL_LEN), any_model=True)
    tool = (
        "To see a tool round trip, put sluicegate-read:<path> in the prompt: the demo worker calls "
        "the agent's file-reading tool on <path> (x-fake-* headers are for curl: agents cannot send them)."
    )
    notes = "".join(f"Note: {line}\n" for line in [*agents.notes(), tool])
    return f"""
Sluicegate demo is running (Ctrl-C stops the gateway, the worker{" and Redis" if embedded else ""}).

  gateway  {base}      metrics: {base}/metrics
  console  {base}/admin/ui/   (sign in with the admin token: {admin})
  redis    {redis}   {where}
  worker   {worker_url}   (deterministic demo worker serving "{DEMO_MODEL}", alias "default")
  models   {DEMO_MODEL} (translated to chat completions), {DEMO_NATIVE_MODEL} (Messages and Responses
           passed through natively: stored responses, previous_response_id, count_tokens)
  team     {DEMO_TEAM}
  API key  {key}   (id {key_id}; {DEMO_RPM} requests a minute: see the x-ratelimit-* headers)

Try it with curl:

  curl -s {base}/v1/chat/completions \\
    -H "Authorization: Bearer {key}" -H "Content-Type: application/json" \\
    -d '{{"model": "{DEMO_MODEL}", "messages": {_HELLO}}}'

or with the OpenAI Python SDK (pip install openai):

from openai import OpenAI
client = OpenAI(base_url="{base}/v1", api_key="{key}")
stream = client.chat.completions.create(model="{DEMO_MODEL}", messages={_HELLO}, stream=True)
for chunk in stream:
    print(chunk.choices[0].delta.content or "", end="", flush=True)

Coding agents (docs/agents.md has every agent's settings). Claude Code:

{textwrap.indent(agents.claude_code(), "  ")}

Codex CLI: save this as {agents.codex_file()}, then run
  {agents.codex_command()}

{agents.codex_profile()}
{notes}
Admin commands (in another shell):

  export SLUICEGATE_URL={base} SLUICEGATE_ADMIN_TOKEN={admin}
  {cli} keys create --team {DEMO_TEAM} --rpm 60
  {cli} usage --team {DEMO_TEAM}
"""


async def _serve_then_print(server: uvicorn.Server, banner: str) -> None:
    """The banner appears only once the gateway listens, so its examples work when copied."""
    serving = asyncio.ensure_future(server.serve())
    while not server.started and not serving.done():  # noqa: ASYNC110 -- uvicorn offers no event
        await asyncio.sleep(0.05)
    if server.started:
        print(banner, flush=True)
    await serving


def run_demo(*, host: str, port: int, state: str | None = None) -> int:
    from gateway.app import create_app
    from gateway.edge.draining import DrainingServer
    from gateway.edge.server import uvicorn_config
    from gateway.observability.logs import configure_logging

    if not _port_is_free(host, port):
        print(
            f"error: {host}:{port} is already in use; pass --port (make demo PORT=...) to pick another",
            file=sys.stderr,
        )
        return 1
    own_redis = os.environ.get("SLUICEGATE_REDIS_URL") or None
    redis: EmbeddedRedis | None = None
    if own_redis is not None:
        try:
            validate_redis_url(own_redis)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        redis_url = own_redis
    else:
        try:
            redis = EmbeddedRedis(
                data_dir=demo_state.redis_dir(state) if state else None, own_process_group=True
            ).start()
        except RedisNotInstalledError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        redis_url = redis.url
    worker: subprocess.Popen[bytes] | None = None
    try:
        worker_port = EmbeddedRedis().port  # any free loopback port will do
        worker = _start_worker(worker_port)
        worker_url = f"http://127.0.0.1:{worker_port}"
        kept = demo_state.load(state)
        admin_token = kept.admin_token
        settings = Settings(
            redis_url=redis_url,
            admin_token=admin_token,
            host=host,
            port=port,
            shutdown_delay_s=0,  # no Service to leave: straight to the drain
            drain_timeout_s=DEMO_DRAIN_S,
            # The Files and Batch API on by default (docs/batch.md): files under the state.
            files_url=os.environ.get("SLUICEGATE_FILES_URL") or f"file://{demo_state.files_dir(state)}",
        )
        table = ModelTable(
            (
                # The demo worker's window, declared: the banner names it before the gateway has
                # read the worker's /v1/models.
                # tokenize: the demo worker serves vLLM's /tokenize, so count_tokens is the
                # worker's exact count on the translated model too, not the gateway's estimate.
                ModelConfig(
                    name=DEMO_MODEL,
                    aliases=("default",),
                    endpoints=(worker_url,),
                    context_window=MAX_MODEL_LEN,
                    tokenize=True,
                ),
                ModelConfig(
                    name=DEMO_NATIVE_MODEL,
                    endpoints=(worker_url,),
                    protocols=Protocols(messages=NATIVE, responses=NATIVE),
                    tokenize=True,
                    context_window=MAX_MODEL_LEN,
                ),
            )
        )
        key_id, key = asyncio.run(_create_demo_key(redis_url, kept))
        demo_state.save(state, demo_state.DemoSecrets(admin_token, key_id, key))
        base = f"http://{host}:{port}"
        configure_logging("warning")
        # A newcomer sees each request's access line (status, tokens, the worker that served it)
        # under the banner; the rest of the gateway stays quiet unless something is wrong.
        logging.getLogger("sluicegate.access").setLevel(logging.INFO)
        shown = redis_url if redis is not None else "redis://…"  # yours may hold a password
        banner = _banner(
            base, shown, worker_url, key, key_id, admin_token, embedded=redis is not None, state=state
        )
        app = create_app(settings, table)
        server = DrainingServer(
            uvicorn_config(app, settings),
            app.state.drain,
            shutdown_delay_s=settings.shutdown_delay_s,
            drain_timeout_s=settings.drain_timeout_s,
        )
        # Ctrl-C drains (a second one hurries it) and returns: no KeyboardInterrupt to catch.
        asyncio.run(_serve_then_print(server, banner))
    except KeyboardInterrupt:
        pass  # before the gateway served (the worker starting): nothing open to drain
    finally:
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(timeout=5)
            except subprocess.TimeoutExpired:
                worker.kill()
        if redis is not None:
            redis.stop()
        print("sluicegate demo stopped.", flush=True)
    return 0
