"""Clients that hold a connection without ever making a proper request: an endless or oversized
header, a head that never completes, a body that never arrives, a path that hides a slash from an
ingress rule, bytes that are not HTTP, a path that would forge a log line; and the way the app cuts
a client off (the `sluicegate.abort` scope extension of gateway/edge/server.py).

Real gateways (uvicorn on loopback, the production protocol settings) and raw sockets. Timeouts
are configured small; every wait is a generous failure limit on something that must happen (the
gateway closes the socket), never a claim that something was still running after a while.
"""

from __future__ import annotations

import json
import secrets
import socket
from urllib.parse import urlsplit

import pytest
from starlette.types import Receive, Scope, Send

from gateway.config import Settings
from tests.conftest import Gateway, GatewayFactory
from tests.http import Reply, get, post
from tests.pipeline.support import CHAT, envelope
from tests.servers import run_uvicorn

DEADLINE_S = 30.0  # a failure limit only: each close below comes within about a second
SMALL_TIMEOUT_S = 0.5
LONG_S = 600.0  # a bound a test must not be rescued by


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    return socket.create_connection((parts.hostname, parts.port), timeout=DEADLINE_S)


def _until_closed(sock: socket.socket) -> bytes:
    """Everything the gateway sends until it closes the connection (a reset counts as a close)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(
            f"the gateway kept the connection open for {DEADLINE_S} s (it sent {received[:200]!r})"
        ) from None
    return received


def _one_response(sock: socket.socket) -> Reply:
    """One response with a content-length, read off a connection that stays open after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before a whole response head: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    reply = _reply(head + b"\r\n\r\n")
    while len(body) < int(reply.headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "the connection closed in the middle of a response body"
        body += chunk
    return Reply(reply.status, reply.headers, body)


def _reply(raw: bytes) -> Reply:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    assert status_line.startswith("HTTP/1.1 "), f"not an HTTP response: {raw[:200]!r}"
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Reply(int(status_line.split()[1]), headers, body)


def _closed_while_trickling(sock: socket.socket, trickle: bytes) -> bytes:
    """Sends `trickle` a little at a time, as a slow client would, until the gateway closes the
    connection; returns what it answered meanwhile. The pace is the client's: never fast enough
    to complete anything within the failure limit."""
    sock.settimeout(0.1)
    received = b""
    for piece in (trickle[i : i + 1] for i in range(len(trickle))):
        try:
            sock.sendall(piece)
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return received
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"the gateway still held a trickling connection after it sent {received[:200]!r}")


def _trickle_of(seconds: float, line: bytes) -> bytes:
    """Enough of `line`, sent one byte per 0.1 s at most, to last `seconds` at least."""
    return line * (int(seconds / 0.1) // len(line) + 1)


# --- the request head: size -----------------------------------------------------------------------


def test_a_64_kb_header_gets_431_in_the_envelope_and_a_close(gateway: Gateway) -> None:
    with _connect(gateway.url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n")
        raw = _until_closed(sock)
    reply = _reply(raw)
    error = envelope(reply, 431, "headers_too_large")
    assert str(gateway.settings.max_header_bytes) in error["message"]
    assert reply.headers.get("connection") == "close"
    assert get(f"{gateway.url}/healthz").status == 200, "the gateway stopped serving others"


def _sent_before_the_cut(url: str, start: bytes) -> int:
    """Sends `start`, then an endless line, until the gateway cuts the connection; returns how
    much of the line went out. That is bounded by socket buffers once the gateway stops reading,
    and far below what we would go on sending if it did not."""
    give_up_at = 16 * 1024 * 1024
    sent = 0
    with _connect(url) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        sock.sendall(start)
        chunk = b"a" * 65536
        try:
            while sent < give_up_at:
                sock.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except TimeoutError:
            raise AssertionError("the gateway neither read the line nor closed the connection") from None
    return sent


def test_a_never_ending_header_line_is_cut_near_the_cap(gateway: Gateway) -> None:
    """httptools would buffer the line however long it grew: four such clients once doubled the
    gateway's memory."""
    sent = _sent_before_the_cut(gateway.url, b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Endless: ")
    assert sent < 4 * 1024 * 1024, f"the gateway read {sent} bytes of one header line before cutting it"
    assert get(f"{gateway.url}/healthz").status == 200, "the gateway stopped serving others"


def test_a_never_ending_trailer_after_a_chunked_body_is_cut(gateway: Gateway) -> None:
    """Trailers are headers after the body, which httptools buffers just the same."""
    key = gateway.new_key()["key"]
    start = (
        b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: gw\r\n"
        b"Authorization: Bearer " + key.encode() + b"\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\n{}\r\n0\r\nX-Endless: "
    )
    sent = _sent_before_the_cut(gateway.url, start)
    assert sent < 4 * 1024 * 1024, f"the gateway read {sent} bytes of one trailer before cutting it"


# --- the request head: time -----------------------------------------------------------------------


def test_connections_that_never_send_a_byte_are_closed(make_gateway: GatewayFactory) -> None:
    with make_gateway(header_timeout_s=SMALL_TIMEOUT_S, keep_alive_timeout_s=LONG_S) as gw:
        idle = [_connect(gw.url) for _ in range(20)]
        try:
            for sock in idle:
                assert _until_closed(sock) == b"", "an idle connection got an answer to nothing"
        finally:
            for sock in idle:
                sock.close()


def test_a_head_that_trickles_in_is_closed_however_steadily_it_comes(make_gateway: GatewayFactory) -> None:
    """Each header line arrives well within any idle limit, but the head never ends: the timer
    runs from the connection, not from the last byte."""
    with (
        make_gateway(header_timeout_s=SMALL_TIMEOUT_S, keep_alive_timeout_s=LONG_S) as gw,
        _connect(gw.url) as sock,
    ):
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n")
        # Far below the size cap: only the timer can end this.
        received = _closed_while_trickling(sock, _trickle_of(DEADLINE_S, b"X-Slow: 1\r\n"))
    assert received == b"", "a head that never ended was answered"


def test_the_next_head_on_a_keep_alive_connection_is_timed_from_its_first_byte(
    make_gateway: GatewayFactory,
) -> None:
    with (
        make_gateway(header_timeout_s=SMALL_TIMEOUT_S, keep_alive_timeout_s=LONG_S) as gw,
        _connect(gw.url) as sock,
    ):
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        assert _one_response(sock).status == 200
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        received = _closed_while_trickling(sock, _trickle_of(DEADLINE_S, b"X-Slow: 1\r\n"))
    assert received == b""


def test_a_keep_alive_client_makes_several_requests_on_one_connection(make_gateway: GatewayFactory) -> None:
    """Large heads (each under the cap, together over it) and bodies, one after another: the cap
    and the timers are per request, and a finished request leaves the connection usable."""
    with make_gateway(keep_alive_timeout_s=LONG_S) as gw:
        key = gw.new_key()["key"]
        big_header = b"X-Big: " + b"a" * (gw.settings.max_header_bytes // 2) + b"\r\n"
        body = json.dumps({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}).encode()
        with _connect(gw.url) as sock:
            for _ in range(3):
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n" + big_header + b"\r\n")
                assert _one_response(sock).status == 200
                sock.sendall(
                    b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: gw\r\n"
                    b"Authorization: Bearer " + key.encode() + b"\r\n"
                    b"Content-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(body) + body
                )
                reply = _one_response(sock)
                envelope(reply, 404, "model_not_found")
                assert reply.headers.get("connection") != "close"


# --- the request body -----------------------------------------------------------------------------


def _partial_post(key: str, declared: int = 5000, sent: int = 200) -> bytes:
    return (
        b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: gw\r\n"
        b"Authorization: Bearer " + key.encode() + b"\r\n"
        b"Content-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % declared + b"{" + b" " * (sent - 1)
    )


def test_a_body_that_stops_arriving_gets_408_in_the_envelope_and_a_close(
    make_gateway: GatewayFactory,
) -> None:
    with make_gateway(body_timeout_s=SMALL_TIMEOUT_S, keep_alive_timeout_s=LONG_S) as gw:
        key = gw.new_key()["key"]
        with _connect(gw.url) as sock:
            sock.sendall(_partial_post(key))
            raw = _until_closed(sock)
    reply = _reply(raw)
    envelope(reply, 408, "request_timeout")
    assert reply.headers.get("connection") == "close"


def test_an_admin_body_that_stops_arriving_is_a_408_not_a_redis_outage(
    make_gateway: GatewayFactory,
) -> None:
    """The admin API bounds its Redis round trips with a timeout of its own: a slow client's body
    must not be read under it (it used to answer 503 redis_unavailable)."""
    # The Redis bound (4 x 0.25 s) is shorter than the body timeout: the 408 can only come from
    # a body read outside it.
    with make_gateway(body_timeout_s=3.0, keep_alive_timeout_s=LONG_S, redis_timeout_s=0.25) as gw:
        partial = (
            b"POST /admin/v1/teams HTTP/1.1\r\nHost: gw\r\n"
            b"Authorization: Bearer " + gw.admin_token.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"
        )
        with _connect(gw.url) as sock:
            sock.sendall(partial)
            raw = _until_closed(sock)
    envelope(_reply(raw), 408, "request_timeout")


def test_a_refused_request_whose_body_trickles_in_does_not_hold_its_connection(
    make_gateway: GatewayFactory,
) -> None:
    """A wrong key is refused before the body is read; the body's bytes that keep coming must
    not keep the connection alive (each byte used to disarm the keep-alive timer)."""
    with (
        make_gateway(body_timeout_s=SMALL_TIMEOUT_S, keep_alive_timeout_s=LONG_S) as gw,
        _connect(gw.url) as sock,
    ):
        sock.sendall(_partial_post("sk-sg-wrong"))
        envelope(_one_response(sock), 401, "invalid_api_key")
        # Far fewer than the 4800 bytes still owed: the body never completes.
        received = _closed_while_trickling(sock, _trickle_of(DEADLINE_S, b" "))
    assert received == b""


def test_a_refused_request_whose_body_then_arrives_leaves_an_idle_connection_that_still_closes(
    make_gateway: GatewayFactory,
) -> None:
    """Once the rest of the body has come, the connection is idle: the keep-alive timeout,
    which the body's bytes disarmed, bounds it again."""
    with make_gateway(body_timeout_s=LONG_S, keep_alive_timeout_s=2.0) as gw, _connect(gw.url) as sock:
        sock.sendall(_partial_post("sk-sg-wrong"))
        envelope(_one_response(sock), 401, "invalid_api_key")
        sock.sendall(b" " * 4800)
        assert _until_closed(sock) == b""


# --- the path -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/admin%2Fv1/teams", "/admin%2fv1/teams", "/admin%5Cv1/teams", "/%61dmin/v1/teams", "/admin/v1/%74eams"],
)
def test_an_encoded_path_cannot_smuggle_a_request_past_an_ingress_rule(gateway: Gateway, path: str) -> None:
    """An ingress that blocks `/admin/` sees `/admin%2Fv1/teams` or `/%61dmin/...`; the gateway
    must not decode either into its admin API."""
    team = "smuggled-" + secrets.token_hex(4)
    url = f"{gateway.url}{path}"
    envelope(post(url, {"name": team}, key=gateway.admin_token), 400, "invalid_request")
    names = [t["name"] for t in gateway.admin.call("GET", "/admin/v1/teams")["data"]]
    assert team not in names, "the encoded path reached the admin API"
    # The ordinary path still works, and an encoded slash in the query string is no path at all.
    assert get(f"{gateway.url}/healthz?next=%2Fadmin").status == 200


def test_bytes_that_are_not_http_get_400_in_the_envelope(gateway: Gateway) -> None:
    with _connect(gateway.url) as sock:
        sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n")
        raw = _until_closed(sock)
    envelope(_reply(raw), 400, "invalid_request")


def test_a_path_cannot_forge_an_access_log_line(gateway: Gateway, all_logs: list[str]) -> None:
    forged = "2026-11-23 00:00:00,000 INFO sluicegate.access request_id=forged"
    for control in ("%0A", "%0D", "%0D%0A", "%E2%80%A8", "%1B[2K"):
        path = f"/v1/x{control}{forged.replace(' ', '%20')}"
        with _connect(gateway.url) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n".encode())
            assert _reply(_until_closed(sock)).status == 400  # percent-encoded: refused, and logged
    access = [line for line in all_logs if "request_id=forged" in line]
    assert len(access) == 5, access
    for line in access:
        assert line.startswith("sluicegate.access INFO request_id="), line
        assert line.isprintable(), line
        assert "request_id=forged" not in line.split(" path=")[0], line


# --- the app's way to cut a client off ------------------------------------------------------------


def test_the_abort_extension_cuts_the_connection_mid_response() -> None:
    reached: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": message["type"] + ".complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        reached.append("started")
        scope["extensions"]["sluicegate.abort"]()
        while (await receive())["type"] != "http.disconnect":
            pass
        reached.append("disconnected")

    with run_uvicorn(app, settings=Settings()) as url, _connect(url) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: gw\r\n\r\n")
        raw = _until_closed(sock)
    reply = _reply(raw)
    assert reply.status == 200
    assert reply.headers["transfer-encoding"] == "chunked"
    assert b"partial" in reply.body
    assert not reply.body.endswith(b"0\r\n\r\n"), "the response was finished, not cut"
    assert reached == ["started", "disconnected"]


def test_a_client_that_pipelines_without_reading_cannot_queue_requests_forever(
    make_gateway: GatewayFactory,
) -> None:
    """uvicorn queues every pipelined head already read; the guard closes a connection that has
    queued more than MAX_PIPELINED, so the queue (and its answers) stays bounded."""
    with make_gateway(keep_alive_timeout_s=LONG_S, header_timeout_s=LONG_S) as gw, _connect(gw.url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n" * 500)
        answered = _until_closed(sock).count(b"HTTP/1.1 200")
    assert answered < 500, "all 500 pipelined requests were queued and answered"
