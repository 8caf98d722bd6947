"""Redis plumbing: the client (plain, TLS, unix, Sentinel or Redis Cluster), key names with the team's
hash tag, the Lua scripts, the circuit breaker, the health watch and where pub/sub listens.
"""
