"""The overflow provider of the tests: the project's fake worker behind real TLS with a private
test CA made here (openssl, docs: ../shared notes' recipe), that checks a provider key and
records what it received, and that a test can turn hostile."""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import Message, Receive, Scope, Send

from tests.servers import listening_socket
from workers.fake.app import create_app as create_fake_worker

PROVIDER_MODEL = "provider-model"


def make_ca(directory: Path) -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server.key): a CA of this test alone, and a certificate it signed for
    127.0.0.1 and localhost."""
    d = str(directory)

    def run(*args: str) -> None:
        subprocess.run(args, cwd=d, check=True, capture_output=True, timeout=60)

    run(
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    run(
        "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1",
    )  # fmt: skip
    (directory / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    run(
        "openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf",
    )  # fmt: skip
    return directory / "ca.pem", directory / "server.pem", directory / "server.key"


@dataclass
class Provider:
    """The running provider: its URL (`https://127.0.0.1:PORT/v1`), key, CA, what it received, and
    how it behaves (`mode`: "ok", "garbage", "redirect", "absurd_usage"; `fake_headers`: x-fake-*
    headers added to every request, which program the fake worker; `canned`: an answer of its
    own, (status, headers, body) sent as it is, for what the fake worker would never say)."""

    url: str
    key: str
    ca_file: Path
    received: list[dict[str, Any]] = field(default_factory=list)
    mode: str = "ok"
    fake_headers: dict[str, str] = field(default_factory=dict)
    refused_keys: int = 0
    canned: tuple[int, list[tuple[bytes, bytes]], bytes] | None = None
    inflight: int = 0  # requests it is answering now, and the most at once
    peak: int = 0


class _Recording:
    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.worker = create_fake_worker([PROVIDER_MODEL])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.worker(scope, receive, send)
            return
        p = self.provider
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        parts: list[bytes] = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        p.received.append({"path": scope["path"], "headers": headers, "body": json.loads(body or b"{}")})
        if headers.get("authorization") != f"Bearer {p.key}":
            p.refused_keys += 1
            await _raw(send, 401, b'{"error":{"message":"Incorrect API key","type":"invalid_request_error"}}')
            return
        if p.canned is not None:
            status, canned_headers, canned_body = p.canned
            await send({"type": "http.response.start", "status": status, "headers": canned_headers})
            await send({"type": "http.response.body", "body": canned_body})
            return
        if p.mode == "garbage":
            await _raw(send, 200, b"\x00\xffthis is not json at all")
            return
        if p.mode == "redirect":
            await _raw(send, 302, b"", [(b"location", b"https://elsewhere.example/v1/chat/completions")])
            return
        if p.mode == "absurd_usage":
            answer = {
                "id": "x",
                "object": "chat.completion",
                "model": PROVIDER_MODEL,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 10**15, "completion_tokens": 10**15, "total_tokens": 2 * 10**15},
            }
            await _raw(send, 200, json.dumps(answer).encode())
            return
        extra = [(k.encode(), v.encode()) for k, v in p.fake_headers.items()]
        forwarded = {**scope, "headers": [*scope["headers"], *extra]}
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        p.inflight += 1
        p.peak = max(p.peak, p.inflight)
        try:
            await self.worker(forwarded, replay, send)
        finally:
            p.inflight -= 1


async def _raw(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


@contextlib.contextmanager
def run_provider(directory: Path) -> Iterator[Provider]:
    ca, cert, key = make_ca(directory)
    sock = listening_socket()
    port = sock.getsockname()[1]
    provider = Provider(
        url=f"https://127.0.0.1:{port}/v1", key="sk-provider-" + secrets.token_hex(16), ca_file=ca
    )
    config = uvicorn.Config(
        _Recording(provider),
        ssl_certfile=str(cert),
        ssl_keyfile=str(key),
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the provider did not start")
        time.sleep(0.01)
    try:
        yield provider
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
