"""A provider's stream, read as the chat contract reads a worker's (gateway/proxy/worker_protocols.py),
with two differences, because a provider is another company's server:

- its error event's words stay with it: they name its organisation, project, quota or limits,
  none of which the client may learn. The client is told the provider failed mid-stream;
- its final usage is never below the output the client received (each content event is at least
  one token), as for a native worker's stream: a provider that reports less is billed what was
  relayed, and its report counts as invalid.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import ErrorCode, GatewayError
from gateway.proxy.settlement import Outcome
from gateway.proxy.worker_protocols import Batch, ChatContract, ChatReader, StreamReader, at_least_relayed


class ProviderReader(ChatReader):
    __slots__ = ()

    def read(self, chunk: dict[str, Any], outcome: Outcome, batch: Batch) -> None:
        super().read(chunk, outcome, batch)
        if batch.failure is not None and "error" in chunk:
            batch.failure = GatewayError(ErrorCode.UPSTREAM_ERROR, "The overflow provider failed mid-stream.")
        if outcome.usage is not None and chunk.get("choices") == [] and "usage" in chunk:
            outcome.usage = batch.usage = at_least_relayed(outcome.usage, outcome)


class ProviderChat(ChatContract):
    def reader(self) -> StreamReader:
        return ProviderReader()  # stateless, like the chat reader; one per stream costs nothing


PROVIDER_CHAT = ProviderChat()
