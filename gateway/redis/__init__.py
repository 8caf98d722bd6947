"""Redis plumbing: the client (plain, TLS, unix or Sentinel), key names with the team's hash tag, the
Lua scripts, the circuit breaker and the health watch.
"""
