-- Atomic GCRA admission over one or more limits (Redis server TIME, so replicas with skewed
-- clocks agree). Either every limit admits the request and all are charged, or none is charged.
-- KEYS[i]: the state key of limit i (all keys share one hash tag: Redis Cluster safe).
-- ARGV: cost, then per limit: burst, rate, period_seconds.
-- Returns: {allowed (0/1), index of the first denying limit (0 if none),
--           then per limit: remaining, reset_after (string), retry_after (string)}.
local cost = tonumber(ARGV[1])
local time = redis.call("TIME")
-- Seconds since 2017 keep the float precise enough for microseconds.
local now = (tonumber(time[1]) - 1483228800) + tonumber(time[2]) / 1000000

local n = #KEYS
local new_tats = {}
local out = {1, 0}
for i = 1, n do
  local burst = tonumber(ARGV[2 + (i - 1) * 3])
  local rate = tonumber(ARGV[3 + (i - 1) * 3])
  local period = tonumber(ARGV[4 + (i - 1) * 3])
  local emission = period / rate
  local tat = tonumber(redis.call("GET", KEYS[i]) or now)
  if tat < now then tat = now end
  local new_tat = tat + emission * cost
  local allow_at = new_tat - emission * burst
  local diff = now - allow_at
  -- The epsilon absorbs float error: 59.4 / 0.6 must count as 99, not 98.99999.
  local remaining = math.floor(diff / emission + 1e-6)
  if diff < -1e-6 then
    if out[1] == 1 then out[1] = 0; out[2] = i end
    out[#out + 1] = 0
    out[#out + 1] = tostring(tat - now)
    out[#out + 1] = tostring(-diff)
  else
    new_tats[i] = new_tat
    out[#out + 1] = remaining
    out[#out + 1] = tostring(new_tat - now)
    out[#out + 1] = "0"
  end
end
if out[1] == 1 then
  for i = 1, n do
    local ttl = math.ceil(new_tats[i] - now)
    if ttl < 1 then ttl = 1 end
    redis.call("SET", KEYS[i], tostring(new_tats[i]), "EX", ttl)
  end
end
return out
