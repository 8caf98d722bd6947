"""The admin API takes an IdP's access tokens, checked as RFC 9068 says, from a real OpenID
provider (oidc-provider on loopback): every bad token is a 401 in the admin envelope, a person's
token is never counted as a wrong admin-token guess, and an IdP that goes down stops only tokens
signed by keys the gateway has not seen."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from typing import Any

import pytest

from gateway.cli import AdminClient, CliError
from tests.conftest import Gateway, GatewayFactory
from tests.identity.conftest import oidc_settings, tokens_only
from tests.identity.idp import AUDIENCE, Idp
from tests.identity.test_roles import answer


def call(gw: Gateway, token: str, path: str = "/admin/v1/me", method: str = "GET", body: Any = None) -> Any:
    gw.secrets_created.append(token)  # no log line may hold it (tests/conftest.py's session check)
    return AdminClient(gw.url, token).call(method, path, body)


def status_of(gw: Gateway, token: str, path: str = "/admin/v1/me") -> tuple[int, dict[str, Any]]:
    return answer(gw, token, "GET", path)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"") -> str:
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}.{_b64(signature)}"


def test_a_platform_admins_token_runs_the_admin_api(oidc_gateway: Gateway, idp: Idp) -> None:
    token = idp.access_token("alice")
    me = call(oidc_gateway, token)
    assert me["kind"] == "person"
    assert (me["subject"], me["email"], me["name"], me["issuer"]) == (
        "alice",
        "alice@example.test",
        "Alice Admin",
        idp.issuer,
    )
    assert me["roles"] == [{"role": "platform-admin", "team": None, "via": "group:platform-admins"}]
    team = "team-" + secrets.token_hex(4)
    call(oidc_gateway, token, "/admin/v1/teams", "POST", {"name": team, "rpm": 100})
    key = call(oidc_gateway, token, "/admin/v1/keys", "POST", {"team": team})
    oidc_gateway.secrets_created.append(key["key"])
    assert key["created_by"] == {
        "kind": "person",
        "sub": "alice",
        "email": "alice@example.test",
        "name": "Alice Admin",
        "issuer": idp.issuer,
    }
    # The key it made works on the client API.
    reply = oidc_gateway.client(key["key"]).chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content


def test_a_client_credentials_token_is_a_service_not_a_person(oidc_gateway: Gateway, idp: Idp) -> None:
    token = idp.client_credentials()
    me = call(oidc_gateway, token)
    assert (me["kind"], me["client_id"], me["email"], me["roles"]) == ("service", "automation", None, [])
    # No role: refused everywhere but /me.
    status, body = status_of(oidc_gateway, token, "/admin/v1/teams")
    assert status == 403
    assert body["error"]["code"] == "forbidden"


def test_an_unverified_email_names_nobody(oidc_gateway: Gateway, idp: Idp) -> None:
    """mallory's IdP says her email is carol's, unverified: she must not be taken for carol."""
    me = call(oidc_gateway, idp.access_token("mallory"))
    assert me["email"] is None
    assert me["subject"] == "mallory"


def _bad_tokens(idp: Idp) -> dict[str, Callable[[], str]]:
    now = int(time.time())
    pem_like = idp.kid.encode()  # what an attacker has: public material
    hs_header = {"alg": "HS256", "typ": "at+jwt", "kid": idp.kid}
    hs_claims = idp.claims(sub="alice", groups=["platform-admins"])
    signing_input = f"{_b64(json.dumps(hs_header).encode())}.{_b64(json.dumps(hs_claims).encode())}"

    def tampered() -> str:
        head, _, sig = idp.sign(idp.claims(sub="dave")).split(".")
        forged = _b64(json.dumps(idp.claims(sub="alice", groups=["platform-admins"])).encode())
        return f"{head}.{forged}.{sig}"

    return {
        "expired": lambda: idp.sign(idp.claims(iat=now - 900, exp=now - 600)),
        "not yet valid": lambda: idp.sign(idp.claims(nbf=now + 600)),
        "issued in the future": lambda: idp.sign(idp.claims(iat=now + 600, exp=now + 900)),
        "no exp": lambda: idp.sign(idp.claims(exp=None)),
        "wrong audience": lambda: idp.sign(idp.claims(aud="https://another.example/api")),
        "several audiences, none of our clients": lambda: idp.sign(
            idp.claims(aud=[AUDIENCE, "https://x.example"], client_id="stranger", azp="stranger")
        ),
        "wrong issuer": lambda: idp.sign(idp.claims(iss="http://127.0.0.1:1")),
        "no subject": lambda: idp.sign(idp.claims(sub=None)),
        "typ JWT (an ID token)": lambda: idp.sign(idp.claims(), typ="JWT"),
        "no typ": lambda: idp.sign(idp.claims(), typ=None),
        "alg none": lambda: _unsigned({"alg": "none", "typ": "at+jwt"}, hs_claims),
        "HS256 with the public key": lambda: (
            signing_input + "." + _b64(hmac.new(pem_like, signing_input.encode(), hashlib.sha256).digest())
        ),
        "unknown kid": lambda: idp.sign(idp.claims(), kid="kid-the-idp-never-had"),
        "tampered payload": tampered,
        "garbage in three parts": lambda: "eyJhbGciOiJSUzI1NiJ9.@@@.!!!",
        "a JSON header and no payload": lambda: _b64(b'{"alg":"RS256","typ":"at+jwt"}') + "..",
    }


@pytest.mark.parametrize(
    "case",
    [
        "expired",
        "not yet valid",
        "issued in the future",
        "no exp",
        "wrong audience",
        "several audiences, none of our clients",
        "wrong issuer",
        "no subject",
        "typ JWT (an ID token)",
        "no typ",
        "alg none",
        "HS256 with the public key",
        "unknown kid",
        "tampered payload",
        "garbage in three parts",
        "a JSON header and no payload",
    ],
)
def test_each_bad_token_is_a_401_in_the_admin_envelope(
    oidc_gateway: Gateway, idp: Idp, case: str, all_logs: list[str]
) -> None:
    token = _bad_tokens(idp)[case]()
    status, body = status_of(oidc_gateway, token)
    assert status == 401, (case, body)
    assert body["error"]["code"] == "admin_unauthorized"
    assert token not in json.dumps(body)
    assert not any(token in line for line in all_logs)


def test_the_signed_valid_token_the_bad_ones_are_made_from_passes(oidc_gateway: Gateway, idp: Idp) -> None:
    """The oracle's tokens are refused for what each case changes, not for being the oracle's."""
    assert call(oidc_gateway, idp.sign(idp.claims(sub="dave")))["subject"] == "dave"
    several = idp.claims(aud=[AUDIENCE, "https://x.example"], azp="console")
    assert call(oidc_gateway, idp.sign(several))["subject"] == "forged-person"


def test_tokens_are_never_counted_as_admin_token_guesses(make_gateway: GatewayFactory, idp: Idp) -> None:
    """Ten wrong guesses lock an address out; any number of expired tokens do not."""
    with make_gateway(oidc=oidc_settings(idp), admin_max_failures=3) as gw:
        expired = idp.sign(idp.claims(iat=int(time.time()) - 900, exp=int(time.time()) - 600))
        for _ in range(10):
            assert status_of(gw, expired)[0] == 401
        status, body = status_of(gw, "not-the-admin-token")
        assert status == 401, body  # the first wrong guess: not locked out by the tokens
        for _ in range(3):
            status_of(gw, "not-the-admin-token")
        assert status_of(gw, "not-the-admin-token")[0] == 429
        # A person's token still works from the locked-out address.
        assert call(gw, idp.access_token("alice"))["kind"] == "person"


def test_with_oidc_and_no_admin_token_the_admin_api_runs_on_tokens(
    make_gateway: GatewayFactory, idp: Idp
) -> None:
    with tokens_only(make_gateway, idp) as gw:
        assert call(gw, idp.access_token("alice"))["roles"][0]["role"] == "platform-admin"
        status, body = status_of(gw, "a-guess-at-an-admin-token-that-is-long-enough")
        assert (status, body["error"]["code"]) == (401, "admin_unauthorized")


def test_neither_admin_token_nor_oidc_disables_the_admin_api(make_gateway: GatewayFactory) -> None:
    with make_gateway(admin_token=None) as gw:
        status, body = status_of(gw, "anything")
        assert (status, body["error"]["code"]) == (403, "admin_disabled")


def test_a_rotated_key_is_accepted_and_an_idp_outage_stops_only_unseen_keys(
    make_gateway: GatewayFactory, idp: Idp
) -> None:
    # 0 s between fetches for an unknown kid: the rotation is seen at the first token that needs it.
    with make_gateway(oidc=oidc_settings(idp, jwks_min_refetch_s=0)) as gw:
        key = gw.new_key()
        before = idp.access_token("alice")
        assert call(gw, before)["kind"] == "person"
        idp.restart()  # a new signing key, as a rotation at the IdP
        after = idp.access_token("alice")
        assert call(gw, after)["kind"] == "person"
        unseen = idp.sign(idp.claims(sub="alice"), kid="a-kid-nobody-has-seen")
        idp.stop()
        try:
            # Keys seen before keep working with the IdP down...
            assert call(gw, after)["kind"] == "person"
            # ...a key never seen cannot be checked, and the answer says why...
            status, body = status_of(gw, unseen)
            assert (status, body["error"]["code"]) == (503, "idp_unavailable")
            assert idp.issuer not in body["error"]["message"]
            # ...and the client API never asks the IdP anything.
            reply = gw.client(key["key"]).chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "hi"}]
            )
            assert reply.choices[0].message.content
        finally:
            idp.start()


def test_an_admin_call_with_a_wrong_token_through_the_cli_says_so(oidc_gateway: Gateway, idp: Idp) -> None:
    expired = idp.sign(idp.claims(iat=int(time.time()) - 900, exp=int(time.time()) - 600))
    oidc_gateway.secrets_created.append(expired)
    with pytest.raises(CliError, match="HTTP 401: The access token is not valid"):
        AdminClient(oidc_gateway.url, expired).call("GET", "/admin/v1/teams")


def test_the_bootstrap_groups_count_only_from_the_token_never_the_directory() -> None:
    """Whoever holds the SCIM token must not make anyone a platform admin by naming a SCIM group
    after a bootstrap group; a binding on a SCIM group works as on a token's."""
    from gateway.identity.bindings import RoleBinding, Subject, grants
    from gateway.identity.principal import Kind, Principal
    from gateway.identity.roles import Role

    person = Principal(Kind.PERSON, subject="eve", directory_groups=frozenset({"platform-admins", "ml"}))
    binding = RoleBinding.new(Subject.GROUP, "ml", Role.AUDITOR, None, None, {"kind": "token"})
    held = grants(person, [binding], {}, frozenset({"platform-admins"}))
    assert [(g.role, g.via) for g in held] == [(Role.AUDITOR, binding.id)]
    from_token = Principal(Kind.PERSON, subject="ana", groups=frozenset({"platform-admins"}))
    assert [g.role for g in grants(from_token, [], {}, frozenset({"platform-admins"}))] == [
        Role.PLATFORM_ADMIN
    ]
