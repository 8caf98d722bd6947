"""The bytes of whole answers a replica holds at once, bounded across all its requests.

One whole answer is bounded (gateway.proxy.whole_answer.MAX_ANSWER_BYTES, 64 MiB), but together
they were not: six concurrent 60 MB answers added 457 MB to a replica, and a client can make an
honest engine write large answers (logprobs for every token, many choices). Each answer's bytes are
counted as they arrive and given back once its client has them; an answer that would take the
count past `limit` is cut (its worker connection closed, which stops the engine) and the client
gets 503 `server_busy`. Memory is about twice the count (the bytes, joined from their parts, then
the parsed answer beside them; bench/answer_memory_bench.py): the bound is on the bytes, which
grow it.

Plain attributes, changed inline where answers are read (gateway.proxy.whole_answer.read_whole): a whole
answer is the hot path, and each Python call there counts (tests/perf/budget.json).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import ErrorCode, GatewayError


@dataclass(slots=True)
class AnswerBytes:
    limit: int
    held: int = 0


def busy() -> GatewayError:
    return GatewayError(
        ErrorCode.SERVER_BUSY,
        "This gateway replica holds as many whole answers as it may; try again shortly, or stream.",
        headers={"retry-after": "1"},
    )
