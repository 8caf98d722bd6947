-- Sets one field of an existing hash unless it is set already (a first revocation's time is
-- kept), optionally with a TTL, and publishes the invalidation in the same step. It never
-- creates the hash: a record holding only that field would be a record with no id. One key
-- (gateway/keys/steps.py).
-- KEYS[1]: the hash. ARGV[1]: field; ARGV[2]: value; ARGV[3]: TTL in seconds (0: keep);
-- ARGV[4]: channel ("" for none); ARGV[5]: the message.
-- Returns the field's value now, or false when the hash does not exist.
if redis.call("EXISTS", KEYS[1]) == 0 then
  return false
end
redis.call("HSETNX", KEYS[1], ARGV[1], ARGV[2])
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call("EXPIRE", KEYS[1], ttl)
end
if ARGV[4] ~= "" then
  redis.call("PUBLISH", ARGV[4], ARGV[5])
end
return redis.call("HGET", KEYS[1], ARGV[1])
