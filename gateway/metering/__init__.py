"""Usage records: written to Redis behind the answer, batched and idempotent (meter.py), kept in a
local spool across restarts while Redis is away (spool.py).
"""
