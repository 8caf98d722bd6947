"""The authorization code flow with PKCE (RFC 6749 §4.1, RFC 7636 S256), as the console runs it
against the IdP: what the authorization request carries, and the code's exchange for tokens with
the console's confidential client (client_secret_basic). The IdP is untrusted: its token answer is
bounded in time and size, follows no redirect, and only `id_token` is read from it."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import urllib.parse
from dataclasses import dataclass

import aiohttp
import orjson

from gateway.identity.oidc import FETCH_TIMEOUT_S, read_bounded

_ERROR_WORD = re.compile(r"[A-Za-z0-9_.-]{1,40}")


@dataclass(frozen=True, slots=True)
class Flow:
    """One sign-in under way: what the callback must find again."""

    state: str
    nonce: str
    verifier: str

    @classmethod
    def new(cls) -> Flow:
        return cls(secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48))

    @property
    def challenge(self) -> str:
        digest = hashlib.sha256(self.verifier.encode()).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def authorize_url(self, endpoint: str, *, client_id: str, redirect_uri: str, scope: str) -> str:
        query = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "scope": scope,
            "state": self.state,
            "nonce": self.nonce,
            "code_challenge": self.challenge,
            "code_challenge_method": "S256",
        }
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{urllib.parse.urlencode(query)}"


class ExchangeFailed(Exception):
    """The IdP did not give tokens for the code: `reason` is ours to log, never its body."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def exchange_code(
    endpoint: str, *, code: str, verifier: str, redirect_uri: str, client_id: str, client_secret: str
) -> str:
    """The ID token the IdP gives for `code`."""
    fields = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
    }
    # RFC 6749 §2.3.1: each part form-urlencoded, then HTTP Basic.
    pair = f"{urllib.parse.quote_plus(client_id)}:{urllib.parse.quote_plus(client_secret)}"
    headers = {
        "authorization": "Basic " + base64.b64encode(pair.encode()).decode(),
        "accept": "application/json",
    }
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(endpoint, data=fields, headers=headers, allow_redirects=False) as response,
        ):
            body = await read_bounded(response)
            status = response.status
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise ExchangeFailed(f"token endpoint unreachable ({type(exc).__name__})") from None
    except ValueError:
        raise ExchangeFailed("token answer too large or broken") from None
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        answer = None
    if status != 200:
        error = answer.get("error") if isinstance(answer, dict) else None
        # OAuth's error codes are short words; anything else (control characters) is not repeated.
        word = error if isinstance(error, str) and _ERROR_WORD.fullmatch(error) else "error"
        raise ExchangeFailed(f"token endpoint answered {status} {word}")
    token = answer.get("id_token") if isinstance(answer, dict) else None
    if not isinstance(token, str):
        raise ExchangeFailed("no id_token in the answer")
    return token
