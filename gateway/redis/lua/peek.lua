#!lua flags=no-writes
-- What remains of each limit right now, as admit.lua would see it, charging nothing: the
-- no-writes flag makes Redis itself refuse any write, so reading can never move a limit.
-- KEYS[i]: the state key of limit i (admit.lua's); all share the team's hash tag.
-- ARGV: three values per limit: kind, a, b
--   "g" GCRA (requests or tokens): a = rate, b = period (s)
--   "c" concurrency slots:         a = max in flight
--   "b" token budget:              a = quota, b = seconds to the period's end
-- Returns per limit: remaining, in use (c: slots held, b: tokens spent, g: 0),
--   reset_after (s, string: until a GCRA limit is whole again, or a budget's period ends).
local time = redis.call("TIME")
-- The same epoch as admit.lua: the stored GCRA times are in it.
local now = (tonumber(time[1]) - 1483228800) + tonumber(time[2]) / 1000000
local out = {}
for i = 1, #KEYS do
  local base = (i - 1) * 3
  local kind = ARGV[base + 1]
  local a, b = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  local remaining, used, reset_after = 0, 0, 0
  if kind == "g" then
    local emission = b / a
    local tat = tonumber(redis.call("GET", KEYS[i]) or now)
    if tat < now then tat = now end
    remaining = math.min(a, math.max(0, math.floor((now - (tat - emission * a)) / emission + 1e-6)))
    reset_after = tat - now
  elseif kind == "c" then
    -- Leases past their time belong to requests that never ended: admit.lua drops them too.
    used = redis.call("ZCOUNT", KEYS[i], "(" .. tostring(now), "+inf")
    remaining = math.max(0, a - used)
  else
    used = tonumber(redis.call("GET", KEYS[i]) or 0)
    remaining = math.max(0, a - used)
    reset_after = b
  end
  out[#out + 1] = remaining
  out[#out + 1] = used
  out[#out + 1] = tostring(reset_after)
end
return out
