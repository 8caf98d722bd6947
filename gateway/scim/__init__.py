"""SCIM 2.0 (RFC 7643/7644): the identity provider provisions people and groups (docs/access.md "SCIM")."""
