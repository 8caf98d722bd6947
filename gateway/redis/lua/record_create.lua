-- Creates a hash only if its key is absent, in one step: a team's record (of two creations of one
-- name, the second finds it taken) or a key's record, which keeps a TTL until the creation that
-- wrote it has finished (an unfinished one, whose secret was never shown, then goes by itself).
-- One key, so it runs on one Redis Cluster node (gateway/keys/steps.py).
-- KEYS[1]: the hash. ARGV[1]: TTL in seconds (0: none); ARGV[2..]: field, value pairs.
-- Returns 1 when created, 0 when the key already existed.
if redis.call("EXISTS", KEYS[1]) == 1 then
  return 0
end
redis.call("HSET", KEYS[1], unpack(ARGV, 2))
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  redis.call("EXPIRE", KEYS[1], ttl)
end
return 1
