"""What a request continues, found (`continued`), and its own stored responses written down
(gateway.routing.stored_responses): where each is held, and the conversation's size, which a
continuation is reserved and billed with.

A whole answer names its response with its usage at hand: the holder is written once, with the
worker's count. A stream names it in its first event, before any usage: the holder is written
then with the size so far (the history and the prompt's estimate, what the settlement would bill
at that point), and corrected to the worker's count when the stream ends, by this request only
(another's holder of the same id is never touched: `remember` writes only where none stands).
"""

from __future__ import annotations

from dataclasses import replace

from gateway.errors import ErrorCode, GatewayError
from gateway.proxy.settlement import Settlement
from gateway.proxy.upstream import UpstreamResponse
from gateway.routing.stored_responses import Holder, StoredResponses


async def continued(
    stored: StoredResponses, response_id: str | None, team_id: str, model: str
) -> Holder | None:
    """The endpoint holding the response a request continues. Another team's response (a
    deleted team's too, whose name a new team took) is a 404 like one that never existed: a
    key learns nothing about other teams' ids."""
    if response_id is None:
        return None
    holder = await stored.find(response_id)
    if holder is None or holder.team != team_id:
        raise GatewayError(
            ErrorCode.NOT_FOUND,
            f"No stored response with id '{response_id}'.",
            param="previous_response_id",
        )
    if holder.model != model:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST,
            f"The response '{response_id}' was made by another model; continue it with "
            f"'{holder.answer_name}'.",
            param="previous_response_id",
        )
    return holder


class Remembering:
    __slots__ = ("_holder", "_settlement", "_stored", "_written")

    def __init__(self, stored: StoredResponses, holder: Holder, settlement: Settlement) -> None:
        self._stored = stored
        self._holder = holder
        self._settlement = settlement
        self._written: dict[str, Holder] = {}

    @classmethod
    def of(
        cls,
        stored: StoredResponses,
        team_id: str,
        upstream: UpstreamResponse,
        settlement: Settlement,
        answer_name: str,
    ) -> Remembering:
        """Writes down where a response the worker stored is held, and for which team (its id:
        a team re-created under the name is not its owner), before the client learns its id."""
        pool = upstream.pool
        holder = Holder(team_id, pool.model.name, answer_name, pool.name, upstream.endpoint.url)
        return cls(stored, holder, settlement)

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
