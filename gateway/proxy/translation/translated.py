"""`TranslatedCall`: the base of a call translated to the worker's chat contract (Anthropic's
Messages, Responses, Gemini), the part every such translation shares: it goes to the chat route
as the chat protocol, continues no stored response, carries no salt of the client's, and its
worker body is the chat body the translation wrote, written the same way for all.

A subclass has `chat` (the chat request's fields but model and the stream's) and `stream`, as
fields or properties; the rest of `Call` (gateway.proxy.dialect) is its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from gateway.proxy import worker_protocols
from gateway.proxy.translation.body import dumps
from gateway.proxy.translation.engine_fields import HeldElsewhere
from gateway.proxy.worker_protocols import WorkerProtocol

CHAT_PATH = "/v1/chat/completions"


class TranslatedCall(HeldElsewhere):
    __slots__ = ()

    # Class attributes, not properties: read several times per request, each read of a property
    # a Python call.
    worker_path: ClassVar[str] = CHAT_PATH
    protocol: ClassVar[WorkerProtocol] = worker_protocols.CHAT
    continues: ClassVar[str | None] = None  # a translation stores nothing
    # The translation sends the worker no field of the client's it does not know.
    client_salt: ClassVar[str | None] = None

    if TYPE_CHECKING:  # a subclass's fields or properties (not class attributes: dataclasses)

        @property
        def chat(self) -> dict[str, Any]: ...

        @property
        def stream(self) -> bool: ...

    def worker_body(
        self, wire_model: str, *, continuous_usage: bool, max_tokens: int | None, cache_salt: str | None
    ) -> bytes:
        """The chat body: the worker's name for the model, the output cap admission reserved, the
        team's cache salt, and on a stream usage always asked for (the client's last event
        carries it, and cumulative on every chunk it meters a client that leaves mid-stream
        exactly)."""
        stream = self.stream
        payload: dict[str, Any] = {"model": wire_model, **self.chat, "stream": stream}
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        if cache_salt is not None:
            payload["cache_salt"] = cache_salt
        if stream:
            options: dict[str, bool] = {"include_usage": True}
            if continuous_usage:
                options["continuous_usage_stats"] = True
            payload["stream_options"] = options
        return dumps(payload)
