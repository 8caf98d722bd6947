"""Client connections capped below the descriptor limit: a connection past the cap gets a clean
503 `server_busy` in the envelope and a close, instead of a process that can accept nothing (the
reset every client sees at the descriptor limit); one connection closing makes room again.

A real gateway with a lowered cap and raw sockets; the default cap is checked against a lowered
soft descriptor limit."""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from gateway.config import Settings
from gateway.edge.server import connection_cap
from tests.adversarial.test_connection_limits import _connect, _one_response, _reply, _until_closed
from tests.conftest import GatewayFactory
from tests.pipeline.support import envelope

CAP = 3
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"


def test_a_connection_past_the_cap_gets_503_and_a_close_and_a_freed_place_is_taken_again(
    make_gateway: GatewayFactory,
) -> None:
    # Idle connections stay open for the whole test, whatever the machine's speed.
    with make_gateway(max_connections=CAP, keep_alive_timeout_s=600) as gw:
        held = [_connect(gw.url) for _ in range(CAP)]
        try:
            for sock in held:  # each one served: the gateway has taken all of them
                sock.sendall(HEALTHZ)
                assert _one_response(sock).status == 200
            with _connect(gw.url) as extra:
                extra.sendall(HEALTHZ)
                reply = _reply(_until_closed(extra))
            error = envelope(reply, 503, "server_busy")
            assert error["type"] == "server_error"
            assert reply.headers["connection"] == "close"
            assert reply.headers["retry-after"] == "1"
            # The connections within the cap are still served.
            held[0].sendall(HEALTHZ)
            assert _one_response(held[0]).status == 200
            # One closes: the next newcomer is served.
            held.pop().close()
            with _connect(gw.url) as newcomer:
                newcomer.sendall(HEALTHZ)
                assert _one_response(newcomer).status == 200
        finally:
            for sock in held:
                sock.close()


@pytest.fixture
def lowered_descriptor_limit() -> Iterator[int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = 1024 if soft == resource.RLIM_INFINITY else min(soft, 1024)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        yield lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_default_cap_leaves_descriptors_for_worker_and_redis_connections(
    lowered_descriptor_limit: int,
) -> None:
    settings = Settings()
    cap = connection_cap(settings)
    # Each client connection may hold a worker connection too; Redis's connections come on top:
    # the pool's and the script calls' own, each bounded by redis_max_connections.
    assert 2 * cap + 2 * settings.redis_max_connections < lowered_descriptor_limit
    assert cap >= 16
    assert connection_cap(Settings(max_connections=7)) == 7


def test_a_silent_connection_past_the_cap_is_closed_without_waiting_out_the_head_timeout(
    make_gateway: GatewayFactory,
) -> None:
    """Past the cap, a flood of connections that send nothing would otherwise each hold a
    descriptor for the whole head timeout: up to the very limit the cap is there to keep off."""
    with make_gateway(max_connections=CAP, keep_alive_timeout_s=600, header_timeout_s=600) as gw:
        held = [_connect(gw.url) for _ in range(CAP)]
        try:
            for sock in held:
                sock.sendall(HEALTHZ)
                assert _one_response(sock).status == 200
            with _connect(gw.url) as silent:
                _until_closed(silent)  # fails if still open after DEADLINE_S, far below 600 s
        finally:
            for sock in held:
                sock.close()
