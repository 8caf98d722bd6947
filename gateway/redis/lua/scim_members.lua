-- Changes one group's members, in one step: the group's members HASH (user id -> the member
-- entry's JSON) and each user's SET of groups move together. One `{scim}` hash tag.
-- KEYS[1]: users HASH; KEYS[2]: groups HASH; KEYS[3]: the group's members HASH;
-- KEYS[4..]: each changed user's SET of groups, in ARGV's order.
-- ARGV[1]: the group's id; ARGV[2]: "set" (the pairs name every member before and after: a
-- replace) or "change" (only these change); ARGV[3]: the most members a group may have;
-- ARGV[4..]: per user, its id then the member's JSON ("" removes it).
-- Returns {"ok"}, {"missing"} (no such group), {"unknown", user id} (no such user), {"full"}
-- or {"retry"} (in "set" mode, a member the caller did not name: it changed since read).
local gid, mode, cap = ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call("HEXISTS", KEYS[2], gid) == 0 then
  return {"missing"}
end
local named, size = {}, redis.call("HLEN", KEYS[3])
for i = 4, #ARGV, 2 do
  local uid, entry = ARGV[i], ARGV[i + 1]
  named[uid] = true
  local present = redis.call("HEXISTS", KEYS[3], uid) == 1
  if entry ~= "" then
    if redis.call("HEXISTS", KEYS[1], uid) == 0 then
      return {"unknown", uid}
    end
    if not present then
      size = size + 1
    end
  elseif present then
    size = size - 1
  end
end
if size > cap then
  return {"full"}
end
if mode == "set" then
  for _, uid in ipairs(redis.call("HKEYS", KEYS[3])) do
    if not named[uid] then
      return {"retry"}
    end
  end
end
for i = 4, #ARGV, 2 do
  local uid, entry, groups = ARGV[i], ARGV[i + 1], KEYS[4 + (i - 4) / 2]
  if entry == "" then
    redis.call("HDEL", KEYS[3], uid)
    redis.call("SREM", groups, gid)
  else
    redis.call("HSET", KEYS[3], uid, entry)
    redis.call("SADD", groups, gid)
  end
end
return {"ok"}
