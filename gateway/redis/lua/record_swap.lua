-- Compare-and-set on one existing hash: writes only if every expected field still holds what the
-- caller read (a missing field reads as ""), so a read-merge-write cannot lose a concurrent one,
-- and publishes the change's invalidation in the same step. One key (gateway/keys/steps.py).
-- KEYS[1]: the hash.
-- ARGV[1]: channel ("" for none); ARGV[2]: the message; ARGV[3]: TTL in seconds (0: keep);
-- ARGV[4]: n, then n field/value pairs it must hold; then m, then m field/value pairs to write;
-- then the fields to delete.
-- Returns -1 when the hash does not exist, 0 when a field differs, 1 when written.
if redis.call("EXISTS", KEYS[1]) == 0 then
  return -1
end
local i = 5
for _ = 1, tonumber(ARGV[4]) do
  if (redis.call("HGET", KEYS[1], ARGV[i]) or "") ~= ARGV[i + 1] then
    return 0
  end
  i = i + 2
end
local writes = tonumber(ARGV[i])
i = i + 1
if writes > 0 then
  redis.call("HSET", KEYS[1], unpack(ARGV, i, i + 2 * writes - 1))
end
i = i + 2 * writes
if i <= #ARGV then
  redis.call("HDEL", KEYS[1], unpack(ARGV, i))
end
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call("EXPIRE", KEYS[1], ttl)
end
if ARGV[1] ~= "" then
  redis.call("PUBLISH", ARGV[1], ARGV[2])
end
return 1
