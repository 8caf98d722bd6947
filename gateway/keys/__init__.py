"""API keys: the bearer-token authenticator with its short local cache, and the key and team store
(hashed at rest).
"""
