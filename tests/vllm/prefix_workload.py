"""Two real vLLMs (CPU build, tiny model, prefix caching on: its default) and a small multi-turn
workload, for the prefix-routing test (test_vllm_prefix.py) and bench/prefix_vllm_bench.py.

The workload: CONVERSATIONS conversations over 2 shared system prompts, TURNS turns each, sent one
request at a time with the conversations interleaved (so the engine that just answered is not the
next request's by accident). Its text is salted per run: one run's prompts never hit the cache
another run left in the same engines. The engine's hit rate is read from its own counters,
`vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total` (tokens), before and after.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "workers" / "vllm"
MAIN_HOME = ROOT / ".cache" / "vllm"
SERVED_NAME = "tiny"
CONVERSATIONS = 6
TURNS = 4
MAX_TOKENS = 24
_WORDS = [
    "cache",
    "engine",
    "prompt",
    "token",
    "block",
    "route",
    "gateway",
    "replica",
    "model",
    "answer",
    "question",
    "system",
    "careful",
    "brief",
    "source",
    "latency",
    "batch",
    "queue",
    "stream",
    "request",
    "worker",
    "index",
    "memory",
    "prefix",
    "chain",
    "hash",
]

# One message's text: the tiny model's tokenizer makes ~1.7 characters a token of this.
Send = Callable[[str, list[dict[str, str]]], str]


def _text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(_WORDS))
    return " ".join(words)


@dataclass
class Conversation:
    name: str
    messages: list[dict[str, str]] = field(default_factory=list)


def run_workload(send: Send, salt: str) -> None:
    """`send(conversation name, messages) -> the answer's text`, once per turn."""
    rng = random.Random(salt)
    systems = [f"[{salt}] System prompt {i}. " + _text(rng, 1200) for i in range(2)]
    talks = [
        Conversation(f"{salt}-c{i}", [{"role": "system", "content": systems[i % 2]}])
        for i in range(CONVERSATIONS)
    ]
    for turn in range(TURNS):
        for talk in talks:
            talk.messages.append({"role": "user", "content": f"{talk.name} turn {turn}: " + _text(rng, 400)})
            answer = send(talk.name, talk.messages)
            talk.messages.append({"role": "assistant", "content": answer})


class Oracle:
    """Always the right engine: a conversation's own from its second turn, and for its first the
    engine that already holds its system prompt (else the next one in turn)."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self._home: dict[str, str] = {}
        self._system_home: dict[str, str] = {}
        self._next = 0

    def pick(self, conversation: str, messages: list[dict[str, str]]) -> str:
        home = self._home.get(conversation)
        if home is None:
            system = messages[0]["content"]
            home = self._system_home.get(system)
            if home is None:
                home = self.urls[self._next % len(self.urls)]
                self._next += 1
                self._system_home[system] = home
            self._home[conversation] = home
        return home


def cache_counters(urls: list[str]) -> tuple[float, float]:
    """(hits, queries) in tokens, summed over the engines."""
    hits = queries = 0.0
    for url in urls:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:  # noqa: S310
            text = reply.read().decode()
        hits += _sum(text, "vllm:prefix_cache_hits_total")
        queries += _sum(text, "vllm:prefix_cache_queries_total")
    return hits, queries


def _sum(text: str, name: str) -> float:
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.eE+-]+)$", re.MULTILINE)
    return sum(float(v) for v in pattern.findall(text))


def hit_rate(urls: list[str], run: Callable[[], None]) -> float:
    hits0, queries0 = cache_counters(urls)
    run()
    hits1, queries1 = cache_counters(urls)
    return (hits1 - hits0) / max(queries1 - queries0, 1.0)


def _home(index: int) -> Path:
    """A vLLM home of its own (pid file, log, tmp) that shares the main one's venv and caches:
    serve.sh runs one instance per home."""
    home = ROOT / ".cache" / f"vllm-prefix-{index}"
    home.mkdir(parents=True, exist_ok=True)
    for name in ("venv", "vllm-cache", "inductor"):
        link = home / name
        (MAIN_HOME / name).mkdir(exist_ok=True)
        if not link.exists():
            link.symlink_to(MAIN_HOME / name)
    return home


@contextlib.contextmanager
def two_vllms() -> Iterator[list[str]]:
    """Starts two vLLMs (one after the other: each takes both cores while it starts) and stops
    both at the end. SLUICEGATE_VLLM_URLS=url1,url2 uses running ones instead."""
    given = os.environ.get("SLUICEGATE_VLLM_URLS")
    if given:
        yield [u.rstrip("/") for u in given.split(",")]
        return
    subprocess.run([SCRIPTS / "setup.sh"], check=True, timeout=1500)
    started: list[dict[str, str]] = []
    try:
        urls = []
        for index in range(2):
            port = free_port()
            env = {
                **os.environ,
                "SLUICEGATE_VLLM_HOME": str(_home(index)),
                "SLUICEGATE_VLLM_MODEL": str(MAIN_HOME / "tiny-model"),
                "SLUICEGATE_VLLM_PORT": str(port),
                "SLUICEGATE_VLLM_NAME": SERVED_NAME,
                "SLUICEGATE_VLLM_WAIT": "400",
                # vLLM binds its engine's threads to core 0 by default: one core each instead.
                "VLLM_CPU_OMP_THREADS_BIND": str(index % (os.cpu_count() or 1)),
            }
            started.append(env)
            subprocess.run(
                [SCRIPTS / "serve.sh", "--max-model-len", "8192", "--enforce-eager"],
                check=True,
                timeout=450,
                env=env,
            )
            urls.append(f"http://127.0.0.1:{port}")
        yield urls
    finally:
        for env in started:
            subprocess.run([SCRIPTS / "stop.sh"], check=False, timeout=60, env=env)
