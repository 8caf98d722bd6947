"""The guard on the client's own x-request-id, which is echoed in a response header and written
into the access log: `re.match` with `$` accepts a trailing newline."""

from __future__ import annotations

from gateway.http.context import client_request_id


def test_a_client_request_id_with_a_trailing_newline_is_refused() -> None:
    assert client_request_id("trace-1\n") is None, (
        "client_request_id('trace-1\\n') was accepted: `$` matches before a final newline, so the "
        "guard that keeps the id safe to log and echo lets a line break through (use fullmatch or \\Z)"
    )
