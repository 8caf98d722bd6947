"""gateway/seams/uvicorn.py against the installed uvicorn: the protocol's state and hooks the
gateway's server subclass reads and overrides, the private method it calls, the server's state
and hooks the drain uses, and no private name of the gateway's subclass shadowing one of
uvicorn's."""

from __future__ import annotations

import ast
import asyncio
import inspect
import textwrap

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from gateway.config import Settings
from gateway.edge.server import GuardedHttpToolsProtocol, uvicorn_config
from gateway.seams import uvicorn as seam
from tests.seams.names import assert_present, missing


async def _app(scope: object, receive: object, send: object) -> None:
    return None


def _protocol(loop: asyncio.AbstractEventLoop) -> HttpToolsProtocol:
    config = uvicorn.Config(_app, loop="asyncio", http="httptools", lifespan="off")
    config.load()
    return HttpToolsProtocol(config=config, server_state=ServerState(), app_state={}, _loop=loop)


def test_the_protocol_has_the_state_hooks_and_private_method_the_server_uses() -> None:
    loop = asyncio.new_event_loop()
    try:
        protocol = _protocol(loop)
        assert_present("uvicorn", protocol, seam.PROTOCOL_STATE)
        assert_present("uvicorn", HttpToolsProtocol, seam.PROTOCOL_HOOKS)
        assert_present("uvicorn", HttpToolsProtocol, seam.PROTOCOL_PRIVATES)
        assert_present("uvicorn", RequestResponseCycle, ["send"])
        assert seam.status_line(431).startswith(b"HTTP/1.1 431 ")
    finally:
        loop.close()


def test_no_private_name_of_the_gateways_protocol_shadows_uvicorns() -> None:
    """A release that adds, say, its own `_close` would be overridden silently by the gateway's."""
    ours = {
        name
        for cls in GuardedHttpToolsProtocol.__mro__
        if cls.__module__.startswith("gateway.")
        for name in vars(cls)
        if name.startswith("_") and not name.startswith("__")
    }
    source = ast.parse(textwrap.dedent(inspect.getsource(GuardedHttpToolsProtocol)))
    ours |= {
        node.attr
        for node in ast.walk(source)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr.startswith("_")
    }
    assert "_head_open" in ours  # the scan sees the instance's own attributes
    loop = asyncio.new_event_loop()
    try:
        theirs = set(dir(HttpToolsProtocol)) | set(vars(_protocol(loop)))
    finally:
        loop.close()
    clash = sorted(ours & theirs)
    assert not clash, f"uvicorn {uvicorn.__version__}: HttpToolsProtocol also has {clash}"


def test_the_server_has_the_state_and_hooks_the_drain_uses() -> None:
    server = uvicorn.Server(uvicorn_config(_app, Settings(), loop="asyncio"))
    gone = missing("uvicorn", server, list(seam.SERVER_HOOKS))
    gone += missing("uvicorn", ServerState(), ["connections", "tasks"])
    assert not gone, "\n".join(gone)
    for name in seam.SERVER_STATE:
        # `servers` and `lifespan` are set in __init__ or when serving starts; the drain only
        # runs after. Checked in uvicorn's own source rather than on a server that never served.
        assert f"self.{name}" in _server_source(), f"uvicorn {uvicorn.__version__}: Server has no {name!r}"


def _server_source() -> str:
    return inspect.getsource(uvicorn.Server)
