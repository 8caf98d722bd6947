"""A real OpenID provider on loopback for the identity tests: panva's oidc-provider
(tests/identity/idp/provider.mjs), installed by tools/get-oidc-provider.sh into .cache/idp.

`Idp` starts it in a Node process on free ports and gets real tokens from it: through the
client-credentials grant, and through a person's sign-in (the authorization code flow with PKCE,
its login and consent pages driven over HTTP as a browser would submit them). `sign` asks the
provider's test-only oracle to sign any claims with the provider's own key, for the tokens it
would never issue (expired, another audience, ...). `restart` starts it again on the same port
with a new key: a real key rotation.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).resolve().parent / "idp" / "provider.mjs"
INSTALLED = ROOT / ".cache" / "idp"
AUDIENCE = "https://sluicegate.test/admin"
CONSOLE = ("console", "console-secret-for-tests-only")
AUTOMATION = ("automation", "automation-secret-for-tests-only")
REDIRECT = "http://127.0.0.1:9/callback"


class Idp:
    def __init__(self, users: dict[str, dict[str, Any]], *, redirect_uris: list[str] | None = None) -> None:
        self.port = free_port()
        self.oracle_port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self._users = users
        self._redirects = [REDIRECT, *(redirect_uris or [])]
        self._process: subprocess.Popen[bytes] | None = None
        self.kid = ""

    def also_redirect_to(self, uri: str) -> None:
        """Registers another redirect URI for the console client (before start): a gateway's
        callback, known once the gateway listens."""
        self._redirects.append(uri)

    def __enter__(self) -> Idp:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if not (INSTALLED / "node_modules" / "oidc-provider").is_dir():
            subprocess.run([str(ROOT / "tools" / "get-oidc-provider.sh")], check=True)
        shutil.copy(SOURCE, INSTALLED / "provider.mjs")
        env = {
            **os.environ,
            "PORT": str(self.port),
            "ORACLE_PORT": str(self.oracle_port),
            "AUDIENCE": AUDIENCE,
            "USERS": json.dumps(self._users),
            "REDIRECT_URIS": json.dumps(self._redirects),
        }
        self._process = subprocess.Popen(
            ["node", "provider.mjs"], cwd=INSTALLED, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert self._process.stdout is not None
        # The provider prints its kid once it listens (after the oracle does).
        for line in self._process.stdout:
            text = line.decode(errors="replace")
            if text.startswith("issuer "):
                self.kid = text.split(" kid ")[1].strip()
                break
        else:
            raise RuntimeError("the OpenID provider did not start")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=30)
            if self._process.stdout is not None:
                self._process.stdout.close()
            self._process = None

    def restart(self) -> None:
        """The same issuer with a new signing key (and nothing else remembered)."""
        old = self.kid
        self.stop()
        self.start()
        assert self.kid != old

    def client_credentials(self, client: tuple[str, str] = AUTOMATION) -> str:
        body = {"grant_type": "client_credentials", "scope": "admin", "resource": AUDIENCE}
        token: str = _post_form(f"{self.issuer}/token", body, auth=client)["access_token"]
        return token

    def sign_in(self, login: str) -> dict[str, Any]:
        """A person's tokens: the authorization code flow with PKCE, through the provider's own
        login and consent pages (any password)."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        query = {
            "response_type": "code",
            "client_id": CONSOLE[0],
            "redirect_uri": REDIRECT,
            "scope": "openid email profile groups",
            "state": secrets.token_urlsafe(8),
            "nonce": secrets.token_urlsafe(8),
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        location = self._walk(
            _Browser(self.issuer), f"{self.issuer}/auth?{urllib.parse.urlencode(query)}", login
        )
        assert location.startswith(REDIRECT), location
        code = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)["code"][0]
        body = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "code_verifier": verifier,
        }
        return _post_form(f"{self.issuer}/token", body, auth=CONSOLE)

    def _walk(self, browser: _Browser, location: str, login: str) -> str:
        """Follows redirects and submits each page's form (login, consent, device confirmation)
        until the flow leaves the provider (a redirect elsewhere: returned) or ends on a page
        without a form (its text returned)."""
        status, headers, page = browser.get(location)
        for _ in range(16):
            if status in (302, 303):
                location = urllib.parse.urljoin(location, headers["location"])
                if not location.startswith(self.issuer):
                    return location
                status, headers, page = browser.get(location)
            elif status == 200 and "<form" in page:
                status, headers, page = self._submit(browser, page, login)
            elif status == 200:
                return page
            else:
                raise AssertionError(f"sign-in stopped at {status}: {page[:200]}")
        raise AssertionError("the sign-in did not end")

    def confirm_device(self, url: str, login: str) -> str:
        """What a person does with `sluicegate login`'s code: open the URL, confirm, sign in,
        consent. Returns the provider's last page."""
        return self._walk(_Browser(self.issuer), url, login)

    def access_token(self, login: str) -> str:
        token: str = self.sign_in(login)["access_token"]
        return token

    @staticmethod
    def _submit(browser: _Browser, page: str, login: str) -> tuple[int, dict[str, str], str]:
        """The page's form (login, consent, device confirmation) submitted as a person would."""
        action = re.search(r'<form[^>]*action="([^"]+)"', page)
        assert action is not None, page[:300]
        fields = dict(re.findall(r'<input[^>]*type="hidden"[^>]*name="([^"]+)"[^>]*value="([^"]*)"', page))
        if 'name="login"' in page:
            fields.update(login=login, password="any")
        return browser.post(action.group(1), fields)

    def sign(self, claims: dict[str, Any], **header: Any) -> str:
        """Any claims, signed by the provider's key (the oracle): a valid signature on a token the
        provider would never issue."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.oracle_port}/sign",
            data=json.dumps({"header": header, "claims": claims}).encode(),
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 -- loopback
            token: str = json.loads(response.read())["token"]
        return token

    def claims(self, **overrides: Any) -> dict[str, Any]:
        """An access token's claims as the provider issues them to a person, changed by `overrides`
        (a value of None removes the claim)."""
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": AUDIENCE,
            "sub": "forged-person",
            "client_id": CONSOLE[0],
            "iat": now,
            "exp": now + 300,
            "jti": secrets.token_hex(8),
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class _Browser:
    """Cookies kept, redirects not followed: each step of a sign-in is seen."""

    def __init__(self, base: str) -> None:
        self._base = base
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(CookieJar()), _NoRedirect
        )

    def get(self, path: str) -> tuple[int, dict[str, str], str]:
        url = urllib.parse.urljoin(self._base, path)
        return self._open(urllib.request.Request(url))  # noqa: S310 -- the loopback issuer

    def post(self, path: str, fields: dict[str, str]) -> tuple[int, dict[str, str], str]:
        data = urllib.parse.urlencode(fields).encode()
        url = urllib.parse.urljoin(self._base, path)
        return self._open(urllib.request.Request(url, data=data, method="POST"))  # noqa: S310

    def _open(self, request: urllib.request.Request) -> tuple[int, dict[str, str], str]:
        try:
            with self._opener.open(request, timeout=30) as response:
                return response.status, _headers(response.headers.items()), response.read().decode()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, _headers(exc.headers.items()), exc.read().decode(errors="replace")


def _headers(items: Any) -> dict[str, str]:
    """Lower-cased names; a repeated header (Set-Cookie) keeps every value, one per line."""
    out: dict[str, str] = {}
    for name, value in items:
        key = name.lower()
        out[key] = f"{out[key]}\n{value}" if key in out else value
    return out


def _post_form(url: str, fields: dict[str, str], *, auth: tuple[str, str]) -> dict[str, Any]:
    basic = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    request = urllib.request.Request(  # noqa: S310 -- the loopback issuer
        url,
        data=urllib.parse.urlencode(fields).encode(),
        method="POST",
        headers={"authorization": f"Basic {basic}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 -- loopback
        result: dict[str, Any] = json.loads(response.read())
    return result
