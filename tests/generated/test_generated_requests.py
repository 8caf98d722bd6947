"""Generated requests, valid and invalid, for every operation in the gateway's own OpenAPI
document, sent to a real gateway (real Redis, real uvicorn, the fake worker) with a real API key
and admin token.

Schemathesis builds the requests from the document: its coverage phase walks each schema's
boundaries and negations deterministically (missing required fields, wrong types, values one past
a minimum, strings off a pattern, unexpected methods and content types), its fuzzing phase draws
a bounded number of Hypothesis examples (valid and invalid: odd unicode, large numbers, unknown
fields, raw bytes) from a fixed seed. Every answer must be:
- never a 5xx, and answered within the client timeout (a hang fails the case);
- a documented status, content type and body, every refusal in the error envelope;
- a 4xx for any request the document says is invalid (its schemas promise no more than the
  gateway checks);
- a 401 once the credentials are taken away or wrong (schemathesis re-sends the request to probe).
"""

from __future__ import annotations

import zlib
from typing import Any

import schemathesis
from schemathesis import Case

from gateway.apis.openapi import document
from tests.conftest import FAKE_MODEL, OTHER_MODEL
from tests.generated.conftest import Live
from tests.generated.wire import assert_answer, send

SEED = 20_611
# Fuzzing examples per operation, on top of the coverage phase's (~20-130 per operation): enough
# to reach odd unicode and large numbers in every field, few enough for seconds on 2 cores.
MAX_EXAMPLES = 25
TIMEOUT_S = 10.0  # generous: the slowest legitimate answer here is a few ms of fake worker

CONFIG = schemathesis.Config.from_dict(
    {
        "seed": SEED,
        "generation": {
            "mode": "all",
            "max-examples": MAX_EXAMPLES,
            "no-shrink": True,  # a failure is reported as found: shrinking costs unbounded time
            "deterministic": True,
            "database": "none",  # nothing written to .hypothesis/, no replay of earlier runs
            "with-security-parameters": False,  # the test sends the real credentials
        },
        "phases": {"stateful": {"enabled": False}},
        "request-timeout": TIMEOUT_S,
        "checks": {
            # Generated model names, team names and key ids mostly name nothing: a valid request
            # for something that does not exist is rightly a 404.
            "positive_data_acceptance": {"enabled": False},
            # Known bug, pinned by test_405_allows_every_method_of_the_path below.
            "allow_header_conformance": {"enabled": False},
        },
    }
)

schema = schemathesis.openapi.from_dict(document(), config=CONFIG)

# Three in four generated model names are swapped for a configured model or alias, so valid
# bodies reach the worker; the rest stay unknown (404). Chosen by a stable hash of the name.
_MODELS = (FAKE_MODEL, "default", OTHER_MODEL, None)


def _credentials(case: Case[Any], live: Live) -> dict[str, str]:
    security = case.operation.definition.raw.get("security") or []
    if {"adminToken": []} in security:
        return {"Authorization": f"Bearer {live.admin_token}"}
    if {"apiKey": []} in security:
        return {"Authorization": f"Bearer {live.api_key}"}
    if {"googApiKey": []} in security:
        return {"x-goog-api-key": live.api_key}
    return {}


def _real_model(case: Case[Any]) -> None:
    body = case.body
    if not (case.path.startswith("/v1/") and isinstance(body, dict)):
        return
    model = body.get("model")
    if isinstance(model, str) and model:  # an invalid one stays invalid
        chosen = _MODELS[zlib.crc32(model.encode("utf-8", "surrogatepass")) % len(_MODELS)]
        body["model"] = chosen or model


_GEMINI_METHODS = ("generateContent", "streamGenerateContent", "countTokens", None)


def _gemini_target(case: Case[Any]) -> None:
    """Gemini names the model and the method in the path (`{model}` is `<model>:<method>`): most
    generated ones are swapped for a configured model and a served method, as for `model` above."""
    raw = case.operation.definition.raw
    model = (case.path_parameters or {}).get("model")
    if case.method != "POST" or "gemini" not in (raw.get("tags") or []) or not isinstance(model, str):
        return
    digest = zlib.crc32(model.encode("utf-8", "surrogatepass"))
    chosen, method = _MODELS[digest % len(_MODELS)], _GEMINI_METHODS[(digest // 7) % len(_GEMINI_METHODS)]
    if chosen is not None and method is not None:
        case.path_parameters = {**(case.path_parameters or {}), "model": f"{chosen}:{method}"}


@schema.parametrize()
def test_generated_request(case: Case[Any], live: Live) -> None:
    _real_model(case)
    _gemini_target(case)
    headers = {**_credentials(case, live), "X-Forwarded-For": live.new_client()}
    response = case.call_and_validate(base_url=live.url, headers=headers, timeout=TIMEOUT_S)
    what = f"{case.method} {case.formatted_path}"
    assert_answer(response.status_code, response.content, what, path=case.formatted_path, method=case.method)


def test_405_allows_every_method_of_the_path(live: Live) -> None:
    wrong = []
    for path, operations in document()["paths"].items():
        concrete = path.replace("{team}", "t").replace("{key_id}", "k")
        status, headers, _ = send(live.url, "TRACE", concrete, None, [], TIMEOUT_S)
        assert status == 405
        allowed = {m.strip() for m in headers["allow"].split(",")} - {"HEAD"}
        if allowed != {m.upper() for m in operations}:
            wrong.append(f"{path}: Allow {sorted(allowed)}")
    assert not wrong, wrong
