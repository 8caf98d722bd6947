-- Deletes one SCIM resource with its index entries and memberships, in one step; a deleted user
-- leaves tombstones under the values that named them, so a still-valid IdP token of theirs is
-- refused until the tombstones expire (gateway/identity/directory.py). One `{scim}` hash tag.
-- KEYS[1]: resources HASH; KEYS[2]: ids ZSET; KEYS[3]: HASH id -> JSON array of index values;
-- KEYS[4..3+n]: index HASHes; KEYS[4+n]: the resource's own membership key (a group's members
-- HASH, a user's SET of groups); KEYS[5+n..4+n+m]: the other side's membership key of each of
-- its m memberships; KEYS[5+n+m..]: tombstones to write.
-- ARGV[1]: id; ARGV[2]: n; ARGV[3]: m; ARGV[4]: tombstone TTL in seconds; ARGV[5]: the index
-- values JSON the caller read (the tombstones were named from them); ARGV[6..5+m]: the ids of the
-- other side, in KEYS' order.
-- Returns {"ok"}, {"missing"}, or {"retry"} when the resource changed since the caller read it
-- (its index values or memberships): the caller reads again and retries.
local id, n, m, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call("HEXISTS", KEYS[1], id) == 0 then
  return {"missing"}
end
local stored = redis.call("HGET", KEYS[3], id) or "[]"
local own = KEYS[4 + n]
local own_is_hash = redis.call("TYPE", own).ok == "hash"
local count = own_is_hash and redis.call("HLEN", own) or redis.call("SCARD", own)
if stored ~= ARGV[5] or count ~= m then
  return {"retry"}
end
for i = 1, m do
  local other = ARGV[5 + i]
  local member = own_is_hash and redis.call("HEXISTS", own, other) or redis.call("SISMEMBER", own, other)
  if member == 0 then
    return {"retry"}
  end
end
for i = 1, m do
  local side = KEYS[4 + n + i]
  if redis.call("TYPE", side).ok == "hash" then
    redis.call("HDEL", side, id)
  else
    redis.call("SREM", side, id)
  end
end
redis.call("DEL", own)
local values = cjson.decode(stored)
for i = 1, n do
  local value = values[i] or ""
  if value ~= "" and redis.call("HGET", KEYS[3 + i], value) == id then
    redis.call("HDEL", KEYS[3 + i], value)
  end
end
redis.call("HDEL", KEYS[1], id)
redis.call("HDEL", KEYS[3], id)
redis.call("ZREM", KEYS[2], id)
for i = 5 + n + m, #KEYS do
  redis.call("SET", KEYS[i], id, "EX", ttl)
end
return {"ok"}
