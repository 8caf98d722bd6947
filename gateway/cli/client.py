"""The admin API over HTTP, as the CLI calls it (stdlib only: the CLI starts fast)."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8080"


def default_url() -> str:
    """The gateway on this machine: its admin listener when SLUICEGATE_ADMIN_PORT is set (as in the
    chart's pods, so `kubectl exec deploy/… -- sluicegate …` needs no SLUICEGATE_URL)."""
    admin_port = os.environ.get("SLUICEGATE_ADMIN_PORT")
    return f"http://127.0.0.1:{admin_port}" if admin_port else DEFAULT_URL


class CliError(Exception):
    """A failure the user can act on: printed as `error: ...`, exit status 1."""


class CliUsageError(CliError):
    """The command cannot run as given (a flag or setting missing): exit status 2, like argparse."""


class AdminClient:
    def __init__(self, base_url: str, token: str | None) -> None:
        self._base = base_url.rstrip("/")
        self._token = token

    @classmethod
    def from_env(cls) -> AdminClient:
        """As SLUICEGATE_ADMIN_TOKEN when it is set (break-glass), else as the person of
        `sluicegate login`; stderr says which."""
        # Imported here: login_store imports this module's errors.
        from gateway.cli.login_store import access_token

        url = os.environ.get("SLUICEGATE_URL") or default_url()
        token = os.environ.get("SLUICEGATE_ADMIN_TOKEN")
        if token:
            print("# as the admin token (SLUICEGATE_ADMIN_TOKEN)", file=sys.stderr)
            return cls(url, token)
        login = access_token(url)
        if login is None:
            # Said before any request: a 401 would not tell which of the two is wrong.
            raise CliUsageError(
                "not signed in: run `sluicegate login` (or set SLUICEGATE_ADMIN_TOKEN to the token the "
                "gateway was started with), and SLUICEGATE_URL to its address, default " + default_url()
            )
        print(f"# as {login[1]} (sluicegate login)", file=sys.stderr)
        return cls(url, login[0])

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, **query: Any) -> Any:
        params = {k: v for k, v in query.items() if v is not None}
        url = self._base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 -- http(s) only
        request.add_header("content-type", "application/json")
        if self._token:
            request.add_header("authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                raw = response.read()
                ctype = response.headers.get("content-type", "")
        except urllib.error.HTTPError as exc:
            with exc:
                raise CliError(_error_message(exc.code, exc.read())) from None
        except urllib.error.URLError as exc:
            raise CliError(f"cannot reach the gateway at {self._base}: {exc.reason}") from None
        return json.loads(raw) if ctype.startswith("application/json") else raw.decode()


def quoted(segment: str) -> str:
    """A path segment from user input: `/` and the like cannot reach another route."""
    return urllib.parse.quote(segment, safe="")


def _error_message(status: int, body: bytes) -> str:
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body.decode(errors="replace")[:200]
    return f"HTTP {status}: {message}"
