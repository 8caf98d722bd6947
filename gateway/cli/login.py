"""`sluicegate login` and `logout`: a person signs in from a terminal, and every admin command then
acts as them (stdlib only, as the rest of the CLI).

    login   asks the gateway which IdP and public client to use (GET /admin/v1/oidc, or --issuer
            and --client-id), then the OAuth device authorization grant (RFC 8628): a code to
            confirm in any browser. An IdP without a device endpoint gets the authorization code
            flow with PKCE and a loopback redirect (RFC 8252) instead.
    tokens  kept in $XDG_CONFIG_HOME/sluicegate/login.json (~/.config/...), mode 0600 in a 0700
            folder; refreshed with the refresh token when the access token is about to expire
    logout  forgets them (and revokes the refresh token where the IdP offers revocation)

SLUICEGATE_ADMIN_TOKEN in the environment wins over a stored login: that is the explicit
break-glass choice. Every admin command says on stderr which identity it acts as.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import http.server
import json
import os
import secrets
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import webbrowser
from typing import Any, ClassVar

from gateway.cli.client import AdminClient, CliError, CliUsageError, default_url
from gateway.cli.login_store import form_post, store_path, stored, write

SCOPE = "openid profile email groups offline_access"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
_MAX_WAIT_S = 900


def _get_json(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310
            document: dict[str, Any] = json.loads(response.read(1 << 20))
    except urllib.error.URLError as exc:
        raise CliError(f"cannot read {url}: {getattr(exc, 'reason', exc)}") from None
    except ValueError:
        raise CliError(f"{url} did not answer with JSON") from None
    return document


def _provider(args: argparse.Namespace) -> tuple[str, str, dict[str, Any]]:
    """The issuer, the CLI's client id and the issuer's discovery document."""
    issuer, client_id = args.issuer, args.client_id
    if issuer is None or client_id is None:
        url = os.environ.get("SLUICEGATE_URL") or default_url()
        told = AdminClient(url, None).call("GET", "/admin/v1/oidc")
        issuer = issuer or told.get("issuer")
        client_id = client_id or told.get("cli_client_id")
    if not issuer or not client_id:
        raise CliUsageError(
            "the gateway names no identity provider or CLI client (SLUICEGATE_OIDC_ISSUER, "
            "SLUICEGATE_OIDC_CLI_CLIENT_ID): give --issuer and --client-id, or use SLUICEGATE_ADMIN_TOKEN"
        )
    document = _get_json(issuer.rstrip("/") + "/.well-known/openid-configuration")
    if document.get("issuer") != issuer:
        raise CliError("the identity provider's discovery document names another issuer")
    return issuer, client_id, document


def _device_flow(document: dict[str, Any], client_id: str, scope: str) -> dict[str, Any]:
    status, started = form_post(
        document["device_authorization_endpoint"], {"client_id": client_id, "scope": scope}
    )
    if status != 200 or "device_code" not in started:
        raise CliError(f"the identity provider refused to start a sign-in: {started.get('error', status)}")
    where = started.get("verification_uri_complete") or started.get("verification_uri")
    print(f"Open {where}", file=sys.stderr)
    print(f"and confirm the code {started.get('user_code')}", file=sys.stderr)
    # RFC 8628 §3.2: 5 s when not said; a shorter one the IdP asks for is its own business.
    interval = max(float(started.get("interval", 5)), 0.1)
    deadline = time.monotonic() + min(float(started.get("expires_in") or 600), _MAX_WAIT_S)
    fields = {"grant_type": DEVICE_GRANT, "device_code": started["device_code"], "client_id": client_id}
    while time.monotonic() < deadline:
        time.sleep(interval)
        status, answer = form_post(document["token_endpoint"], fields)
        if status == 200 and "access_token" in answer:
            return answer
        error = answer.get("error")
        if error == "authorization_pending":
            continue
        if error == "slow_down":
            interval += 5  # RFC 8628 §3.5
            continue
        if error == "expired_token":
            raise CliError("the code expired before it was confirmed: run sluicegate login again")
        if error == "access_denied":
            raise CliError("the sign-in was refused at the identity provider")
        raise CliError(f"the identity provider ended the sign-in: {error or status}")
    raise CliError("the code was not confirmed in time: run sluicegate login again")


class _Callback(http.server.BaseHTTPRequestHandler):
    result: ClassVar[dict[str, str]] = {}

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        type(self).result = {k: v[0] for k, v in query.items()}
        self.send_response(200)
        self.send_header("content-type", "text/plain; charset=utf-8")
        self.end_headers()
        self.wfile.write(b"Signed in: you can close this tab and go back to the terminal.\n")

    def log_message(self, *args: Any) -> None:  # quiet: the URL holds the code
        return


def _code_flow(document: dict[str, Any], client_id: str, scope: str) -> dict[str, Any]:
    """RFC 8252: a loopback redirect on a port the system picks, PKCE S256, state checked."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _Callback)
    redirect_uri = f"http://127.0.0.1:{server.server_port}/callback"
    verifier, state = secrets.token_urlsafe(48), secrets.token_urlsafe(24)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "scope": scope,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    url = f"{document['authorization_endpoint']}?{urllib.parse.urlencode(query)}"
    print(f"Open {url}", file=sys.stderr)
    webbrowser.open(url)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    server.timeout = _MAX_WAIT_S
    thread.start()
    thread.join(_MAX_WAIT_S)
    server.server_close()
    got = _Callback.result
    if got.get("state") != state:
        raise CliError("the sign-in came back without this login's state: run sluicegate login again")
    if "error" in got:
        raise CliError(f"the identity provider refused the sign-in: {got['error']}")
    fields = {
        "grant_type": "authorization_code",
        "code": got.get("code", ""),
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
        "client_id": client_id,
    }
    status, answer = form_post(document["token_endpoint"], fields)
    if status != 200 or "access_token" not in answer:
        raise CliError(f"the identity provider did not give tokens: {answer.get('error', status)}")
    return answer


def cmd_login(args: argparse.Namespace) -> int:
    issuer, client_id, document = _provider(args)
    scope = SCOPE + (f" {args.scope}" if args.scope else "")
    if document.get("device_authorization_endpoint") and not args.browser:
        tokens = _device_flow(document, client_id, scope)
    else:
        tokens = _code_flow(document, client_id, scope)
    login = {
        "gateway": os.environ.get("SLUICEGATE_URL") or default_url(),
        "issuer": issuer,
        "client_id": client_id,
        "token_endpoint": document["token_endpoint"],
        "revocation_endpoint": document.get("revocation_endpoint"),
        "access_token": tokens["access_token"],
        "refresh_token": tokens.get("refresh_token"),
        "expires_at": time.time() + float(tokens.get("expires_in") or 300),
    }
    me = AdminClient(login["gateway"], login["access_token"]).call("GET", "/admin/v1/me")
    login["who"] = me.get("email") or me.get("subject")
    write(login)
    roles = ", ".join(r["role"] + (f" of {r['team']}" if r.get("team") else "") for r in me.get("roles", []))
    print(f"signed in as {login['who']}: {roles or 'no role yet (ask a platform admin)'}")
    return 0


def cmd_logout(args: argparse.Namespace) -> int:
    login = stored()
    if login is None:
        print("not signed in")
        return 0
    if login.get("revocation_endpoint") and login.get("refresh_token"):
        fields = {
            "token": login["refresh_token"],
            "token_type_hint": "refresh_token",
            "client_id": login["client_id"],
        }
        with contextlib.suppress(CliError):  # forgotten here all the same; it expires by itself
            form_post(login["revocation_endpoint"], fields)
    store_path().unlink(missing_ok=True)
    print(f"signed out {login.get('who') or ''}".rstrip())
    return 0
