"""One request's stored responses written down (gateway.routing.stored_responses): where each is
held, and the conversation's size, which a continuation is reserved and billed with.

A whole answer names its response with its usage at hand: the holder is written once, with the
worker's count. A stream names it in its first event, before any usage: the holder is written
then with the size so far (the history and the prompt's estimate, what the settlement would bill
at that point), and corrected to the worker's count when the stream ends, by this request only
(another's holder of the same id is never touched: `remember` writes only where none stands).
"""

from __future__ import annotations

from dataclasses import replace

from gateway.proxy.settlement import Settlement
from gateway.routing.stored_responses import Holder, StoredResponses


class Remembering:
    __slots__ = ("_holder", "_settlement", "_stored", "_written")

    def __init__(self, stored: StoredResponses, holder: Holder, settlement: Settlement) -> None:
        self._stored = stored
        self._holder = holder
        self._settlement = settlement
        self._written: dict[str, Holder] = {}

    async def __call__(self, response_id: str) -> None:
        """Before the client learns the id: it must find the holder as soon as it can ask."""
        holder = replace(self._holder, tokens=sum(self._settlement.tokens()))
        if await self._stored.remember(response_id, holder):
            self._written[response_id] = holder

    async def resize(self) -> None:
        """After a stream: its holders get the worker's final count, if it reported one."""
        usage = self._settlement.outcome.usage
        if usage is None:
            return  # the size so far stands: at least the history it continued
        size = usage.prompt_tokens + usage.completion_tokens
        for response_id, holder in self._written.items():
            if holder.tokens != size:
                await self._stored.resize(response_id, replace(holder, tokens=size))
