from __future__ import annotations

import orjson

from gateway.errors import ErrorCode, GatewayError


def test_every_error_code_is_its_own_member() -> None:
    # Enum members with equal values silently become aliases; each code must stay distinct.
    assert len({code.wire_code for code in ErrorCode}) == len(ErrorCode.__members__)


def test_envelope_shape_and_sse_form() -> None:
    err = GatewayError(ErrorCode.INVALID_REQUEST, "'model' is required.", param="model")
    assert orjson.loads(err.body()) == {
        "error": {
            "message": "'model' is required.",
            "type": "invalid_request_error",
            "param": "model",
            "code": "invalid_request",
        }
    }
    assert err.sse_event() == b"data: " + err.body() + b"\n\n"
    assert err.status == 400
