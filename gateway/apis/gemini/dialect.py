"""Google's Gemini API (`generateContent`, `streamGenerateContent`) by translation to the worker's
OpenAI chat contract, so every chat worker (vLLM, Reframr, the fake) serves Gemini clients.

    request, tools, generation, schema   the client's body, checked, as a chat body
    answer                               a whole chat answer as a GenerateContentResponse
    stream                               the worker's chat stream as Gemini chunks (SSE or array)
    errors                               the gateway's errors in Google's envelope
    routes                               the routes (model and method in the path)

Unlike the other APIs the model and whether to stream come from the path, not the body, so a
dialect is made per request (`GeminiDialect.of`), holding them; it is a small frozen record.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from gateway.apis.gemini import answer, errors
from gateway.apis.gemini.request import Translated, translate
from gateway.apis.gemini.stream import GeminiStream
from gateway.errors import GatewayError
from gateway.limits.admission import Admission
from gateway.limits.output import AskedOutput
from gateway.proxy.dialect import ClientStream
from gateway.proxy.translation.body import open_body
from gateway.proxy.translation.bounds import BodyBounds, BodyLists, check_bounds
from gateway.proxy.translation.translated import TranslatedCall

NAME = "gemini"
# What the item bound counts (gateway.proxy.translation.bounds): the contents, each one's parts,
# the tools, a tool of function declarations counting each of them.
LISTS = BodyLists(
    items=("contents",), parts=("parts",), tools=("tools",), tool_groups=("functionDeclarations",)
)
BOUNDS = BodyBounds(lists=LISTS)


def response_id() -> str:
    return os.urandom(12).hex()


@dataclass(frozen=True, slots=True)
class GeminiCall(TranslatedCall):
    request: Translated
    stream: bool

    @property
    def model(self) -> str:
        return self.request.model

    @property
    def chat(self) -> dict[str, Any]:
        return self.request.chat

    @property
    def user(self) -> str | None:
        return None  # Gemini has no end-user field

    @property
    def ignored(self) -> tuple[str, ...]:
        return self.request.ignored

    def asked_output(self) -> AskedOutput:
        return AskedOutput(self.request.max_tokens, self.request.candidates)

    def estimated_prompt_tokens(self) -> int:
        return self.request.prompt_estimate


@dataclass(frozen=True, slots=True)
class GeminiDialect:
    model: str = ""  # from the path
    streaming: bool = False  # streamGenerateContent
    sse: bool = True  # `?alt=sse`; else one JSON array
    name: str = NAME
    # Gemini's streams have no keep-alive event: a comment line would break the JSON array, and
    # Google's SDKs read every line that is no `data:` line as JSON.
    keepalive: bytes | None = None

    @classmethod
    def of(cls, model: str, *, streaming: bool, sse: bool) -> GeminiDialect:
        return cls(model=model, streaming=streaming, sse=sse)

    def parse(
        self, raw: bytes, native_models: Collection[str] = (), bounds: BodyBounds = BOUNDS
    ) -> GeminiCall:
        # No worker speaks Gemini's API itself: always translated.
        payload = open_body(raw)
        check_bounds(payload, bounds)
        return GeminiCall(translate(payload, self.model), self.streaming)

    def stream(self, call: GeminiCall, answer_name: str) -> ClientStream:
        return GeminiStream(
            response_id=response_id(),
            model_version=answer_name,
            prompt_estimate=call.estimated_prompt_tokens(),
            include_thoughts=call.request.include_thoughts,
            sse=self.sse,
        )

    def whole(self, call: GeminiCall, answer_: dict[str, Any], body: bytes, answer_name: str) -> bytes:
        return answer.whole(
            answer_,
            response_id=response_id(),
            model_version=answer_name,
            include_thoughts=call.request.include_thoughts,
            # What the request is metered with when the worker's report is a lie (Settlement).
            estimates=(call.estimated_prompt_tokens(), self.estimated_completion_tokens(answer_)),
        )

    def estimated_completion_tokens(self, answer_: dict[str, Any]) -> int:
        return answer.estimated_completion_tokens(answer_)

    def error_response(self, error: GatewayError) -> Response:
        return errors.error_response(error)

    def limit_headers(self, admission: Admission) -> dict[str, str]:
        """Google's API sends no rate-limit headers; a refusal's retry-after (and RetryInfo) is
        what its clients read."""
        return {}
