"""A bounded, steady load of real OpenAI SDK clients, each answer timed and its usage kept."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

import openai
from openai.types.chat import ChatCompletionMessageParam

from tests.conftest import FAKE_MODEL


@dataclass(frozen=True)
class Client:
    key_id: str
    secret: str
    stream: bool


@dataclass(frozen=True)
class Outcome:
    key_id: str
    status: int  # 0: no HTTP answer at all (client timeout, connection error, broken stream)
    code: str | None  # the error envelope's code
    started: float  # time.monotonic()
    seconds: float
    prompt_tokens: int = 0  # as the worker reported them to the client
    completion_tokens: int = 0


def _one(sdk: openai.OpenAI, client: Client, rng: random.Random) -> tuple[int, int] | None:
    """Different sizes per request, so a lost or doubled record shows in the sums."""
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": " ".join(["word"] * rng.randint(1, 6))}
    ]
    headers = {"x-fake-tokens": str(rng.randint(1, 12))}
    if not client.stream:
        reply = sdk.chat.completions.create(
            model=FAKE_MODEL,
            messages=messages,
            extra_headers=headers,
        )
        return (reply.usage.prompt_tokens, reply.usage.completion_tokens) if reply.usage else None
    usage = None
    with sdk.chat.completions.create(
        model=FAKE_MODEL,
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=headers,
    ) as stream:
        for chunk in stream:
            usage = chunk.usage or usage
    return (usage.prompt_tokens, usage.completion_tokens) if usage else None


def _drive(
    base_url: str, client: Client, until: float, timeout_s: float, seed: int, out: list[Outcome]
) -> None:
    rng = random.Random(seed)
    with openai.OpenAI(
        base_url=f"{base_url}/v1", api_key=client.secret, max_retries=0, timeout=timeout_s
    ) as sdk:
        while True:
            started = time.monotonic()
            try:
                usage = _one(sdk, client, rng)
                seconds = time.monotonic() - started
                outcome = (
                    Outcome(client.key_id, 200, None, started, seconds, *usage)
                    if usage
                    else Outcome(client.key_id, 0, "no_usage", started, seconds)
                )
            except openai.APIStatusError as exc:
                code = exc.code if isinstance(exc.code, str) else None
                outcome = Outcome(client.key_id, exc.status_code, code, started, time.monotonic() - started)
            except openai.APIError as exc:
                outcome = Outcome(client.key_id, 0, type(exc).__name__, started, time.monotonic() - started)
            out.append(outcome)
            if time.monotonic() >= until:
                return
            time.sleep(0.01)  # a steady load, not a flood: the clients share the test's CPU


def warm_up(base_url: str, clients: list[Client], timeout_s: float) -> list[Outcome]:
    """One request per client before the clock starts: the gateway caches each key, and this
    process pays its first-use costs (the SDK's lazy imports take seconds on a busy machine)."""
    out: list[Outcome] = []
    for i, client in enumerate(clients):
        _drive(base_url, client, 0.0, timeout_s, -1 - i, out)
    return out


def run_load(base_url: str, clients: list[Client], duration_s: float, timeout_s: float) -> list[Outcome]:
    until = time.monotonic() + duration_s
    results: list[list[Outcome]] = [[] for _ in clients]
    threads = [
        threading.Thread(target=_drive, args=(base_url, c, until, timeout_s, i, results[i]), daemon=True)
        for i, c in enumerate(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(duration_s + timeout_s + 10)
    assert not any(t.is_alive() for t in threads), "a client thread never came back"
    return sorted((o for r in results for o in r), key=lambda o: o.started)
