"""Where an admitted request may go, and what a pool's worker is sent (gateway.proxy.pipeline's
route step): its plan of pools and what their policies route by (the prompt's block hashes for the
pools routed by prefix among them), and the body each pool's worker gets."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from gateway.errors import ErrorCode, GatewayError
from gateway.http.context import RequestContext
from gateway.proxy.admitted import Admitted
from gateway.proxy.cache_salt import SaltScope
from gateway.proxy.dialect import Call
from gateway.proxy.translation.engine_priority import with_engine_priority
from gateway.proxy.worker_protocols import CHAT
from gateway.routing.policy import RouteRequest
from gateway.routing.pool import Pool
from gateway.routing.prefix import body_blocks
from gateway.routing.router import Router
from gateway.routing.share import ShareTicket


def route(
    router: Router, admitted: Admitted, api: str, ctx: RequestContext, share: ShareTicket | None
) -> tuple[list[Pool], RouteRequest]:
    """The pools to try in order, and what their policies route by. The plan: the pool holding
    what the request continues, else the model's and its fallbacks' (of those that speak `api`
    natively, for a native call)."""
    call, holder = admitted.call, admitted.holder
    if holder is not None:
        pool = router.pool(holder.pool)
        if pool is None or pool.get(holder.endpoint) is None:
            raise GatewayError(
                ErrorCode.NOT_FOUND,
                "The worker that stored the previous response is gone.",
                param="previous_response_id",
            )
        plan = [pool]
    else:
        native = call.protocol is not CHAT
        plan = router.plan(admitted.requested, native_api=api if native else None)
    blocks, block_bytes = prompt_blocks(call, plan, admitted.cap.per_answer, admitted.salt)
    return plan, RouteRequest(
        model=admitted.requested.model.name,
        user=call.user,
        session_id=ctx.session_id,
        team=ctx.team,
        share_weight=admitted.principal.team_limits.share_weight,
        pinned=None if holder is None else holder.endpoint,
        share=share,
        blocks=blocks,
        block_bytes=block_bytes,
        no_wait=ctx.batch,
    )


def worker_body(call: Call, pool: Pool, cap: int | None, salt: SaltScope, background: bool) -> bytes:
    """What `pool`'s worker is sent: the call in its model's name, with the output cap and the
    pool's cache_salt. A batch line's (`background`) carries the engine priority of the pool's
    model, behind interactive requests in a vLLM that orders by it
    (gateway/proxy/translation/engine_priority.py): only a batch line to such a model pays for the
    second encoding."""
    body = call.worker_body(
        pool.wire_model,
        continuous_usage=pool.model.continuous_usage,
        max_tokens=cap,
        cache_salt=salt.for_model(pool.model.cache_isolation),
    )
    if not (background and pool.model.engine_priority):
        return body
    return orjson.dumps(with_engine_priority(orjson.loads(body), pool.model, background=True))


def prompt_blocks(
    call: Call, plan: Sequence[Pool], cap: int | None, salt: SaltScope
) -> tuple[tuple[bytes, ...], int]:
    """The prompt's block hashes and their size, once per request, when a pool it may go to is
    routed by prefix (the first such: a fallback model's pools too, and those of another block
    size ignore them): from the body the worker gets, its cache_salt included, so hashed as the
    worker will see it and never predicting a hit across salts the engine will not give."""
    for pool in plan:
        if pool.prefix is not None:
            body = call.worker_body(
                pool.wire_model,
                continuous_usage=False,
                max_tokens=cap,
                cache_salt=salt.for_model(pool.model.cache_isolation),
            )
            return body_blocks(body, pool.prefix.block_bytes, call.protocol.prompt), pool.prefix.block_bytes
    return (), 0
