"""What the SCIM endpoint serves, described with scim2-models (RFC 7643/7644 as pydantic models)
rather than hand-written schemas: the resource types, what discovery publishes, and the reading
policy for the two IdPs that send not quite RFC 7644.

Users carry the enterprise extension: Entra ID's default attribute mappings send department,
employeeNumber and manager in it, and a strict server would refuse each of its users.
"""

from __future__ import annotations

from typing import Any

from scim2_models import (
    AuthenticationScheme,
    Bulk,
    ChangePassword,
    EnterpriseUser,
    ETag,
    Filter,
    Group,
    Patch,
    ResourceType,
    ScimPolicy,
    ScimProvider,
    ServiceProviderConfig,
    Sort,
    User,
)

UserModel = User[EnterpriseUser]
GroupModel = Group

# The most resources one page (`count`) or one filter answers: what bounds a list's memory.
MAX_RESULTS = 200

CONFIG = ServiceProviderConfig(
    patch=Patch(supported=True),
    bulk=Bulk(supported=False, max_operations=0, max_payload_size=0),
    filter=Filter(supported=True, max_results=MAX_RESULTS),
    change_password=ChangePassword(supported=False),
    sort=Sort(supported=False),
    etag=ETag(supported=False),
    authentication_schemes=[
        AuthenticationScheme(
            type=AuthenticationScheme.Type.oauthbearertoken,
            name="Bearer token",
            description="Authorization: Bearer <SLUICEGATE_SCIM_TOKEN>",
            primary=True,
        )
    ],
)

# Entra ID removes a member with the member in `value` instead of a `members[value eq ...]`
# path, and replaces `emails[type eq "work"].value` on a user who has no work email yet: both as
# Microsoft documents them. Attributes no schema declares stay refused (invalidValue).
POLICY = ScimPolicy(
    unknown=ScimPolicy.Unknown.forbid,
    remove_value_as_filter=ScimPolicy.RemoveValue.apply,
    unmatched_path_filter=ScimPolicy.UnmatchedPathFilter.create,
)

PROVIDER = ScimProvider(
    models=[User, EnterpriseUser, Group],
    resource_types=[ResourceType.from_resource(UserModel), ResourceType.from_resource(GroupModel)],
    config=CONFIG,
    policy=POLICY,
)


def primary_email(user: dict[str, Any]) -> str:
    """The user's primary email, lower-cased (the one marked primary, or the only one); ""."""
    emails = [e for e in user.get("emails") or () if isinstance(e, dict) and e.get("value")]
    chosen = next((e for e in emails if e.get("primary") is True), emails[0] if len(emails) == 1 else None)
    return str(chosen["value"]).lower() if chosen else ""


def user_index_values(user: dict[str, Any]) -> list[str]:
    """In store.USERS.indexes' order: userName (case-insensitive, RFC 7643 §4.1.1), externalId
    (case-exact, RFC 7643 §3.1), primary email (case-insensitive)."""
    return [str(user.get("userName") or "").lower(), str(user.get("externalId") or ""), primary_email(user)]


def group_index_values(group: dict[str, Any]) -> list[str]:
    return [str(group.get("displayName") or "").lower()]
