"""People and services on the admin plane: who is calling (principal.py), how an IdP's access token
proves it (oidc.py fetches the issuer's keys, tokens.py checks a token), what they may do (roles.py)
and the bindings that grant it (bindings.py).

Used by the admin API, the console and the CLI, never by the client APIs: a request with a team's
API key must not depend on an identity provider being up.
"""
