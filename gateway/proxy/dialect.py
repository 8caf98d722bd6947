"""The seam between the pipeline and one client API.

    Dialect.parse(raw, native_models) -> Call   the client's body, validated: model, stream,
                                        output asked (forwarded as it is for a model whose workers
                                        serve the API natively: gateway.proxy.translation.native)
    Call.worker_body(wire_model, ..., max_tokens)   the body the worker gets, with the output cap
                                        admission reserved (gateway.limits.output)
    Dialect.stream(call, name) -> ClientStream   worker chunks -> client bytes, one stream
    Dialect.whole(call, answer, name)   a worker's whole answer -> the client's body
    Dialect.error_response / error_event / limit_headers   the API's own envelope and headers

Reading usage, finish reasons and token timing from the worker is not here: that depends on the
protocol the worker speaks (`Call.protocol`, gateway.proxy.worker_protocols), not the client API.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol, Self, TypeVar

from starlette.responses import Response

from gateway.errors import GatewayError
from gateway.limits.admission import Admission
from gateway.limits.output import AskedOutput
from gateway.model_table import ModelConfig
from gateway.proxy.translation.bounds import DEFAULT_BOUNDS, BodyBounds
from gateway.proxy.worker_protocols import WorkerProtocol


class Call(Protocol):
    """One parsed client request."""

    @property
    def model(self) -> str: ...

    @property
    def stream(self) -> bool: ...

    @property
    def user(self) -> str | None: ...

    @property
    def worker_path(self) -> str: ...

    @property
    def protocol(self) -> WorkerProtocol:
        """How the worker answers: the chat contract, or the client's API served natively."""
        ...

    @property
    def continues(self) -> str | None:
        """A response the worker keeps that this request continues: only the endpoint holding it
        can serve it."""
        ...

    def asked_output(self) -> AskedOutput:
        """The output cap per answer the client set (None: none), and how many answers."""
        ...

    @property
    def ignored(self) -> tuple[str, ...]:
        """What the translation dropped, e.g. ("output_config", "tools[8]:web_search"): the
        pipeline names it in x-sluicegate-ignored and counts it (gateway.proxy.translation.ignored)."""
        ...

    def estimated_prompt_tokens(self) -> int: ...

    def held_to(self, model: ModelConfig) -> Self:
        """The call with only the client's fields the model's workers may get: an OpenAI body is
        forwarded, so it is held to an allow-list and the model's logprob cap
        (gateway.proxy.translation.engine_fields); a 400 names a field whose loss would change
        the answer. A translated call writes its worker body itself and returns itself."""
        ...

    @property
    def client_salt(self) -> str | None:
        """The client's own vLLM `cache_salt`, checked at parse; only ever mixed into the salt
        the gateway derives (gateway.proxy.cache_salt), never sent as it is."""
        ...

    def worker_body(
        self, wire_model: str, *, continuous_usage: bool, max_tokens: int | None, cache_salt: str | None
    ) -> bytes:
        """`max_tokens`: the cap per answer the worker must get, in the API's own field (None:
        the request generates nothing, as embeddings). `cache_salt`: the one the worker gets, in
        place of any the client sent (None: none; embeddings never get one). Never a default: a
        call that forgot the team's salt would share a worker's prefix cache across teams."""
        ...


class StreamTooLarge(Exception):
    """Raised by `ClientStream.event` when re-telling the stream would hold more of it than the
    translation bounds (fragments gathered until the end, more candidates than can be asked): the
    relay ends the stream with the client's error event, as for an oversized worker event."""


class ClientStream(Protocol):
    """Turns one worker stream into the client's events."""

    def event(self, chunk: dict[str, Any], data: bytes, raw: bytes) -> bytes:
        """The client's bytes for one parsed worker chunk (b"" to drop it). `data` is the
        event's JSON as the worker sent it, `raw` the whole event (`data: ...` and its blank line).
        Raises StreamTooLarge past what the translation holds."""
        ...

    def done(self) -> bytes:
        """The client's bytes once the worker said it is done."""
        ...

    def failure(self, error: GatewayError) -> bytes:
        """The client's bytes for a failure after the stream began: it ends the stream."""
        ...


CallT = TypeVar("CallT", bound=Call)


class Dialect(Protocol[CallT]):
    @property
    def name(self) -> str:
        """The API family, a metric label, usage dimension and log field, e.g. "chat"."""
        ...

    @property
    def keepalive(self) -> bytes | None:
        """An event to send on a stream that has been quiet for a while, if the API has one."""
        ...

    def parse(self, raw: bytes, native_models: Collection[str], bounds: BodyBounds = DEFAULT_BOUNDS) -> CallT:
        """`native_models`: the model names whose workers serve this API themselves. `bounds`: how
        many messages, parts and tools the body may hold (checked before anything walks it)."""
        ...

    def stream(self, call: CallT, answer_name: str) -> ClientStream: ...

    def whole(self, call: CallT, answer: dict[str, Any], body: bytes, answer_name: str) -> bytes: ...

    def estimated_completion_tokens(self, answer: dict[str, Any]) -> int:
        """For a whole answer whose usage report cannot be trusted."""
        ...

    def error_response(self, error: GatewayError) -> Response: ...

    def limit_headers(self, admission: Admission) -> dict[str, str]: ...
