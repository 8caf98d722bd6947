-- Atomic admission over every limit of one request: either all admit it and are charged, or
-- none is. Redis server TIME, so replicas with skewed clocks agree.
-- KEYS[i]: the state key of limit i, then last the request's admission marker (it exists while
-- the charges are unsettled); all share the team's hash tag (Redis Cluster safe).
-- ARGV[1]: the request id; then four values per limit: kind, a, b, c
--   "g" GCRA, for requests or tokens: a = rate, b = period (s), c = cost (1, or reserved tokens)
--   "c" concurrency slots:            a = max in flight, b = lease (s)
--   "b" token budget:                 a = quota, b = reserved tokens, c = seconds to period end
-- Returns {allowed (0/1), index of the first refusing limit (0 if none),
--          then per limit: remaining, reset_after (s, string), retry_after (s, string)}.
local time = redis.call("TIME")
-- Seconds since 2017 keep a double precise to the microsecond.
local now = (tonumber(time[1]) - 1483228800) + tonumber(time[2]) / 1000000
local out = {1, 0}
local apply = {}
local limits = #KEYS - 1
local lease = 0
for i = 1, limits do
  local base = 1 + (i - 1) * 4
  local kind = ARGV[base + 1]
  local a, b, c = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
  local ok, remaining, reset_after, retry_after
  if kind == "g" then
    local emission = b / a
    local tat = tonumber(redis.call("GET", KEYS[i]) or now)
    if tat < now then tat = now end
    local new_tat = tat + emission * c
    local diff = now - (new_tat - emission * a)
    -- The epsilons absorb float error: 59.4 / 0.6 must count as 99, not 98.99999.
    ok = diff >= -1e-6
    if ok then
      remaining, reset_after, retry_after = math.floor(diff / emission + 1e-6), new_tat - now, 0
      apply[i] = new_tat
    else
      remaining = math.max(0, math.floor((now - (tat - emission * a)) / emission + 1e-6))
      reset_after, retry_after = tat - now, -diff
    end
  elseif kind == "c" then
    redis.call("ZREMRANGEBYSCORE", KEYS[i], "-inf", now)  -- leases of requests that never ended
    local held = redis.call("ZCARD", KEYS[i])
    ok = held < a
    remaining, reset_after, retry_after = ok and (a - held - 1) or 0, 0, ok and 0 or 1
    if ok then apply[i] = now + b end
  else
    local used = tonumber(redis.call("GET", KEYS[i]) or 0)
    ok = used + b <= a
    remaining, reset_after, retry_after = math.max(0, a - used - (ok and b or 0)), c, ok and 0 or c
    if ok then apply[i] = b end
  end
  if not ok and out[1] == 1 then
    out[1], out[2] = 0, i
  end
  out[#out + 1] = remaining
  out[#out + 1] = tostring(reset_after)
  out[#out + 1] = tostring(retry_after)
end
if out[1] == 1 then
  for i = 1, limits do
    local base = 1 + (i - 1) * 4
    local kind = ARGV[base + 1]
    if kind == "g" then
      redis.call("SET", KEYS[i], tostring(apply[i]), "EX", math.ceil(apply[i] - now) + 1)
    elseif kind == "c" then
      redis.call("ZADD", KEYS[i], apply[i], ARGV[1])
      redis.call("EXPIRE", KEYS[i], math.ceil(tonumber(ARGV[base + 3])) + 1)
      lease = math.ceil(tonumber(ARGV[base + 3])) + 1
    else
      redis.call("INCRBY", KEYS[i], apply[i])
      redis.call("EXPIRE", KEYS[i], math.ceil(tonumber(ARGV[base + 4])) + 3600)
    end
  end
end
if out[1] == 1 then
  -- Outlives every lease; a budget's or a minute's refund is worthless much later anyway.
  redis.call("SET", KEYS[#KEYS], "1", "EX", math.max(lease, 3600))
end
return out
