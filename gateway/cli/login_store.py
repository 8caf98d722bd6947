"""A person's stored login, for the CLI (stdlib only): where it lives, how it is written (mode
0600 in a 0700 folder, before a byte of it exists), and its access token refreshed when it is
about to expire (gateway/cli/login.py signs in and out)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from gateway.cli.client import CliError

_REFRESH_MARGIN_S = 30


def store_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "sluicegate" / "login.json"


def write(login: dict[str, Any]) -> None:
    """A new file, 0600 before a byte is written and never through a link, put in place at once
    (os.replace): a reader sees the old login or the new one, never half of one."""
    path = store_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(login, out)
        os.replace(scratch, path)
    except BaseException:
        scratch.unlink(missing_ok=True)
        raise


def stored() -> dict[str, Any] | None:
    try:
        login: dict[str, Any] = json.loads(store_path().read_text())
    except (OSError, ValueError):
        return None
    return login


def form_post(url: str, fields: dict[str, str]) -> tuple[int, dict[str, Any]]:
    data = urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(url, data=data, method="POST")  # noqa: S310 -- the IdP's https URL
    request.add_header("accept", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status, json.loads(response.read(1 << 20))
    except urllib.error.HTTPError as exc:
        with exc:
            try:
                return exc.code, json.loads(exc.read(1 << 20))
            except ValueError:
                return exc.code, {}
    except urllib.error.URLError as exc:
        raise CliError(f"cannot reach the identity provider: {exc.reason}") from None
    except ValueError:
        raise CliError("the identity provider did not answer with JSON") from None


def access_token(url: str) -> tuple[str, str] | None:
    """The stored login's access token, refreshed when about to expire, and who it is. Only for
    the gateway it was made for: a token for production is never sent to another URL."""
    login = stored()
    if login is None:
        return None
    if str(login.get("gateway", "")).rstrip("/") != url.rstrip("/"):
        raise CliError(
            f"your login is for {login.get('gateway')}, not {url}: run `sluicegate login` with "
            "SLUICEGATE_URL set to this gateway (or use SLUICEGATE_ADMIN_TOKEN)"
        )
    try:
        expires_at = float(login.get("expires_at", 0))
    except (TypeError, ValueError):
        expires_at = 0.0  # a damaged file: refresh, or ask for a new login
    if expires_at - _REFRESH_MARGIN_S < time.time():
        if not login.get("refresh_token"):
            raise CliError("your login has expired: run sluicegate login")
        fields = {
            "grant_type": "refresh_token",
            "refresh_token": login["refresh_token"],
            "client_id": login["client_id"],
        }
        status, answer = form_post(login["token_endpoint"], fields)
        if status != 200 or "access_token" not in answer:
            raise CliError("your login has expired: run sluicegate login")
        login["access_token"] = answer["access_token"]
        login["refresh_token"] = answer.get("refresh_token", login["refresh_token"])
        login["expires_at"] = time.time() + float(answer.get("expires_in") or 300)
        write(login)
    return str(login["access_token"]), str(login.get("who") or "your login")
