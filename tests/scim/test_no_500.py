"""Odd input on every SCIM route is a 4xx in SCIM's envelope, never a 500: each body, path and
query below was written to reach a different corner of parsing, validation, PATCH and filters."""

from __future__ import annotations

import json
import urllib.parse

from tests.scim.conftest import Scim, new_group, new_user

PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
BODIES: list[object] = [
    {},
    None,
    "text",
    7,
    {"schemas": "not a list"},
    {"schemas": [PATCH]},
    {"schemas": [PATCH], "Operations": "all of them"},
    {"schemas": [PATCH], "Operations": []},
    {"schemas": [PATCH], "Operations": [{}]},
    {"schemas": [PATCH], "Operations": [None, 3]},
    {"schemas": [PATCH], "Operations": [{"op": "add"}]},
    {"schemas": [PATCH], "Operations": [{"op": "replace", "path": "]]][[", "value": 1}]},
    {"schemas": [PATCH], "Operations": [{"op": "replace", "path": "id", "value": "mine"}]},
    {"schemas": [PATCH], "Operations": [{"op": "replace", "path": "meta.created", "value": "x"}]},
    {"schemas": [PATCH], "Operations": [{"op": "replace", "path": "active", "value": {"deep": [1]}}]},
    {"schemas": [PATCH], "Operations": [{"op": "add", "path": "members", "value": "one"}]},
    {"schemas": [PATCH], "Operations": [{"op": "add", "path": "members", "value": [{"value": 5}]}]},
    {
        "schemas": [PATCH],
        "Operations": [{"op": "add", "path": "members", "value": [{"value": "x", "type": "Group"}]}],
    },
    {"schemas": [PATCH], "Operations": [{"op": "remove", "path": 'members[value eq "nobody"]'}]},
    {"schemas": [PATCH], "Operations": [{"op": "remove", "path": "members[display co 1]"}]},
    {
        "schemas": [PATCH],
        "Operations": [{"op": "replace", "path": 'emails[type eq "work"].value', "value": 9}],
    },
    {"schemas": [PATCH], "Operations": [{"op": "replace", "value": {"userName": None}}]},
    {"schemas": [PATCH], "Operations": [{"op": "replace", "value": {"displayName": ""}}]},
    {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": ["a"]},
    {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": "a" * 100_000},
    {
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "userName": "x",
        "emails": [{"value": "no-at"}],
    },
    {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"], "displayName": "x", "members": "all"},
    {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"], "displayName": "x", "members": [None]},
    {"schemas": ["urn:unknown"], "userName": "x"},
]
QUERIES = [
    {"filter": ""},
    {"filter": "userName"},
    {"filter": 'userName eq "a" or userName eq "b"'},
    {"filter": 'not (userName eq "a")'},
    {"filter": 'emails[type eq "work"].value eq "x"'},
    {"filter": "userName eq 5"},
    {"filter": "displayName eq null"},
    {"startIndex": "x"},
    {"startIndex": "-9", "count": "-1"},
    {"count": "99999999999999999999999"},
    {"attributes": "nope.nope"},
    {"attributes": "userName", "excludedAttributes": "active"},
    {"excludedAttributes": "[["},
]


def test_odd_input_is_never_a_500(scim: Scim) -> None:
    user = new_user(scim)
    group = new_group(scim, user["id"])
    paths = [
        "/Users",
        "/Groups",
        f"/Users/{user['id']}",
        f"/Groups/{group['id']}",
        "/Users/.search",
        "/.search",
    ]
    seen = set()
    for path in paths:
        for method in ("POST", "PUT", "PATCH"):
            for body in BODIES:
                answer = scim.send(method, path, raw=json.dumps(body).encode())
                assert answer.status < 500, (method, path, body, answer.body)
                seen.add(answer.status)
        for query in QUERIES:
            answer = scim.send("GET", path + "?" + urllib.parse.urlencode(query))
            assert answer.status < 500, (path, query, answer.body)
    assert 400 in seen
