-- Token-weighted fair share for one pool (VTC, "virtual token counter"): every gateway replica
-- reads and charges the same counters, so a team's share of a saturated pool holds across them.
-- One script does the two things a replica asks: apply a batch of updates (charges at dispatch,
-- corrections at settlement, "still backlogged" heartbeats) and, with candidates, pick the team
-- to serve next and charge it; a dispatch that must choose thus costs one round trip, with
-- whatever updates were pending riding along.
--
-- KEYS[1]: HASH team -> weighted service (tokens / weight), and "~" .. team -> the part of it
-- reserved at dispatch and not yet settled (team names never start with "~"); KEYS[2]: ZSET team -> ms when last seen
-- backlogged or dispatched ("active"); KEYS[3]: the floor, the highest least-counter seen.
-- All three share the pool's hash tag {vtc:<pool>} (gateway/redis/keys.py).
-- ARGV[1]: key TTL in ms; ARGV[2]: active window in ms; ARGV[3]: n updates, then 3 per update:
--   kind, team, amount. kind "c": charge and reserve (the team is active); "b": backlogged
--   (active, no charge; sent for the teams with requests in flight on a replica); "w": the same
--   for a team waiting on a replica, which also marks the pool contended (below); "s": correct an earlier charge by amount (actual - estimate); "r": that charge is
--   settled, release its reservation. "s" and "r" only apply if the team's counter is still there
--   (it is gone when the keys expired or the team went inactive).
-- Then: n candidates, then 3 per candidate: team, band, cost. The highest band wins; within it,
-- the least counter (ties: the earlier candidate); the winner is charged (and reserves) its cost.
-- Reply: {chosen (1-based; 0 for none), team, counter, team, counter, ..., contended}: the
-- counters of the active teams, then 1 if a team waited on any replica (a "w" update or a pick)
-- within the window, else 0. A replica skips the charges of a pool nobody waits in (counters only
-- matter to choose between waiting teams) and learns from this when to charge again. The last
-- time a team waited is the counters hash's field "~" (no team's: names are never empty).
--
-- A team that becomes active (it was not in the ZSET within the window) starts at the least
-- settled counter (counter - reserved) of the other active teams, or at the floor when there is
-- none: not on their reservations, which may be refunded once it is there (a team alone holding
-- huge estimates would then be that far below the newcomer). idling earns no credit
-- (VTC's lift), and whatever it was charged and never corrected (a replica that died with its
-- requests in flight) is forgotten then too, so no counter drifts for longer than the window.
-- A team inactive for the window is dropped from the hash; all keys expire after the TTL idle.
local counters, active, floorkey = KEYS[1], KEYS[2], KEYS[3]
local ttl, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local stale = redis.call("ZRANGEBYSCORE", active, "-inf", "(" .. (now - window))
if #stale > 0 then
  redis.call("ZREM", active, unpack(stale))
  redis.call("HDEL", counters, unpack(stale))
  for k = 1, #stale do
    stale[k] = "~" .. stale[k]
  end
  redis.call("HDEL", counters, unpack(stale))
end
local floor = tonumber(redis.call("GET", floorkey) or "0")
local seen, reserved = {}, {}
local names = redis.call("ZRANGE", active, 0, -1)
if #names > 0 then
  local fields = {}
  for i, team in ipairs(names) do
    fields[2 * i - 1], fields[2 * i] = team, "~" .. team
  end
  local values = redis.call("HMGET", counters, unpack(fields))
  for i, team in ipairs(names) do
    seen[team] = tonumber(values[2 * i - 1]) or floor
    reserved[team] = tonumber(values[2 * i]) or 0
  end
end

-- The least settled counter of the active teams but `except`.
local function least(except)
  local m = nil
  for team, c in pairs(seen) do
    local settled = c - reserved[team]
    if team ~= except and (m == nil or settled < m) then
      m = settled
    end
  end
  return m
end

local function touch(team)
  if seen[team] == nil then
    local start = least(team) or floor
    seen[team], reserved[team] = start, 0
    redis.call("HSET", counters, team, tostring(start))
    redis.call("HDEL", counters, "~" .. team)
  end
  redis.call("ZADD", active, now, team)
end

local function charge(team, amount)
  seen[team] = tonumber(redis.call("HINCRBYFLOAT", counters, team, amount))
end

local function reserve(team, amount)
  local r = math.max(reserved[team] + tonumber(amount), 0)
  reserved[team] = r
  redis.call("HSET", counters, "~" .. team, tostring(r))
end

local waited = false
local i = 4
for _ = 1, tonumber(ARGV[3]) do
  local kind, team, amount = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  i = i + 3
  if kind == "c" then
    touch(team)
    charge(team, amount)
    reserve(team, amount)
  elseif kind == "b" then
    touch(team)
  elseif kind == "w" then
    touch(team)
    waited = true
  elseif seen[team] == nil then
    -- a correction or release for a counter that is gone: nothing to correct
  elseif kind == "s" then
    charge(team, amount)
  elseif kind == "r" then
    reserve(team, -tonumber(amount))
  end
end

local chosen, chosen_team, chosen_cost, best_band, best = 0, nil, nil, nil, nil
local n = tonumber(ARGV[i] or "0")
i = i + 1
for k = 1, n do
  local team, band, cost = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  i = i + 3
  touch(team)
  local c = seen[team]
  if chosen == 0 or band > best_band or (band == best_band and c < best) then
    chosen, chosen_team, chosen_cost, best_band, best = k, team, cost, band, c
  end
end
if n > 0 then
  waited = true -- candidates are waiting teams
end
if chosen > 0 then
  charge(chosen_team, chosen_cost)
  reserve(chosen_team, chosen_cost)
end

-- Before the PEXPIREs: the HSET may create the hash.
local last
if waited then
  last = now
  redis.call("HSET", counters, "~", tostring(now))
else
  last = tonumber(redis.call("HGET", counters, "~") or "")
end

local low = least(nil)
if low ~= nil and low > floor then
  redis.call("SET", floorkey, tostring(low), "PX", ttl)
else
  redis.call("PEXPIRE", floorkey, ttl)
end
redis.call("PEXPIRE", counters, ttl)
redis.call("PEXPIRE", active, ttl)

local reply = { chosen }
for team, c in pairs(seen) do
  reply[#reply + 1] = team
  reply[#reply + 1] = tostring(c)
end
reply[#reply + 1] = (last ~= nil and now - last < window) and 1 or 0
return reply
