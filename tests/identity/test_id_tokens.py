"""The console's ID tokens, checked against the real provider's keys: its nonce binds a token to
one sign-in, its audience is the console's client, and an access token is never taken for one
(nor an ID token for an access token)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.identity.oidc import JwksCache
from gateway.identity.tokens import TokenRejected, TokenVerifier
from tests.identity.conftest import oidc_settings
from tests.identity.idp import CONSOLE, Idp


def _verify(idp: Idp, token: str, nonce: str = "n-1") -> Any:
    settings = oidc_settings(idp)
    verifier = TokenVerifier(settings, JwksCache(settings.issuer))
    return asyncio.run(verifier.verify_id_token(token, client_id=CONSOLE[0], nonce=nonce))


def _id_token(idp: Idp, **claims: Any) -> str:
    return idp.sign(
        idp.claims(aud=CONSOLE[0], nonce="n-1", sub="carol", email_verified=True, **claims), typ="JWT"
    )


def test_the_id_token_of_this_sign_in_names_its_person(idp: Idp) -> None:
    person = _verify(idp, _id_token(idp, email="carol@example.test", name="Carol"))
    assert (person.subject, person.email, person.name) == ("carol", "carol@example.test", "Carol")


@pytest.mark.parametrize(
    ("claims", "header"),
    [
        ({"nonce": "another-sign-in"}, {}),  # a token from another sign-in, replayed
        ({"nonce": None}, {}),
        ({"aud": "another-client"}, {}),
        ({"aud": [CONSOLE[0], "other"], "azp": "other"}, {}),
        ({}, {"typ": "at+jwt"}),  # an access token is no ID token
        ({"exp": 1}, {}),
    ],
)
def test_an_id_token_of_another_sign_in_client_or_kind_is_refused(
    idp: Idp, claims: dict[str, Any], header: dict[str, Any]
) -> None:
    base = idp.claims(aud=CONSOLE[0], nonce="n-1", sub="carol")
    token = idp.sign(
        {k: v for k, v in {**base, **claims}.items() if v is not None}, **{"typ": "JWT", **header}
    )
    with pytest.raises(TokenRejected):
        _verify(idp, token)
