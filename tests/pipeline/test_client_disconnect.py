"""A client that hangs up while still uploading its request body is a client that left (499 in
the gateway's own metrics), not a gateway failure: no 500, no ERROR log line, no traceback."""

from __future__ import annotations

import json
import socket

import pytest

from tests.conftest import FAKE_MODEL, GatewayFactory
from tests.pipeline.support import DEADLINE_S, chat, metric_samples
from tests.waiting import wait_until

DECLARED = 100_000


def _leave_during_upload(url: str, key: str, sent: int) -> None:
    """A POST whose head declares 100000 bytes of body, of which only `sent` are sent; then the
    socket is closed."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps(chat(FAKE_MODEL, padding="x" * DECLARED)).encode()[:sent]
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}:{port}\r\n"
        f"authorization: Bearer {key}\r\ncontent-type: application/json\r\n"
        f"content-length: {DECLARED}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
        sock.sendall(head + body)


@pytest.mark.parametrize("sent", [0, 1000], ids=["head-only", "part-of-the-body"])
def test_a_client_leaving_during_the_upload_is_a_499(
    make_gateway: GatewayFactory, all_logs: list[str], sent: int
) -> None:
    with make_gateway() as gw:
        key = gw.new_key()["key"]
        _leave_during_upload(gw.url, key, sent)

        def counted() -> list[tuple[dict[str, str], float]]:
            return [(labels, v) for labels, v in metric_samples(gw, "sluicegate_requests_total") if v > 0]

        try:
            wait_until(counted, DEADLINE_S, "the request counted in sluicegate_requests_total")
        except AssertionError:
            raise AssertionError(
                "a client that left during its upload was never counted in sluicegate_requests_total"
            ) from None
        codes = {labels["code"] for labels, _ in counted()}
        assert "500" not in codes, (
            f"a client leaving during its upload was counted as a gateway failure (codes {sorted(codes)}): "
            "the 5xx alerts would fire for clients hanging up"
        )
        assert codes == {"499"}, f"a client leaving during its upload was counted with codes {sorted(codes)}"
    errors = [line for line in all_logs if line.split(" ", 2)[1:2] in (["ERROR"], ["CRITICAL"])]
    assert not errors, f"a client hanging up during its upload logged errors: {errors[:3]}"
    tracebacks = [line for line in all_logs if "Traceback" in line]
    assert not tracebacks, f"a client hanging up during its upload logged a traceback: {tracebacks[0][:2000]}"
