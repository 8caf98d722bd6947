-- Creates or replaces one SCIM resource (a user or a group) with its unique index entries, in
-- one step: of two writes claiming one userName, the second finds it taken. All keys share the
-- `{scim}` hash tag (gateway/redis/keys.py scim), so this runs on one Redis Cluster slot.
-- KEYS[1]: resources HASH id -> JSON; KEYS[2]: ids ZSET (pages); KEYS[3]: HASH id -> JSON array
-- of the resource's index values (what to release on the next write); KEYS[4..3+n]: the n index
-- HASHes value -> id; KEYS[4+n..]: tombstones to clear (the new values name a live user again).
-- ARGV[1]: id; ARGV[2]: "create" or "replace"; ARGV[3]: the resource's JSON; ARGV[4]: n;
-- ARGV[5..4+n]: the new index values, in KEYS' order ("" for none); ARGV[5+n]: the JSON the
-- caller read and changed (a PATCH), or "" (a PUT replaces whatever is there).
-- Returns {"ok"}, {"missing"} (replace of an absent id), {"exists"} (create of a present id),
-- {"changed"} (the resource is no longer what the caller read: it reads again) or {"taken", i}
-- (index i, 1-based, holds the value for another id).
local id, mode, n = ARGV[1], ARGV[2], tonumber(ARGV[4])
local present = redis.call("HEXISTS", KEYS[1], id) == 1
if mode == "create" and present then
  return {"exists"}
end
if mode == "replace" and not present then
  return {"missing"}
end
local expected = ARGV[5 + n] or ""
if expected ~= "" and redis.call("HGET", KEYS[1], id) ~= expected then
  return {"changed"}
end
for i = 1, n do
  local value = ARGV[4 + i]
  if value ~= "" then
    local owner = redis.call("HGET", KEYS[3 + i], value)
    if owner and owner ~= id then
      return {"taken", i}
    end
  end
end
local old = redis.call("HGET", KEYS[3], id)
local olds = old and cjson.decode(old) or {}
local news = {}
for i = 1, n do
  local before, after = olds[i] or "", ARGV[4 + i]
  news[i] = after
  if before ~= "" and before ~= after and redis.call("HGET", KEYS[3 + i], before) == id then
    redis.call("HDEL", KEYS[3 + i], before)
  end
  if after ~= "" then
    redis.call("HSET", KEYS[3 + i], after, id)
  end
end
redis.call("HSET", KEYS[1], id, ARGV[3])
redis.call("HSET", KEYS[3], id, cjson.encode(news))
redis.call("ZADD", KEYS[2], 0, id)
for i = 4 + n, #KEYS do
  redis.call("DEL", KEYS[i])
end
return {"ok"}
