-- Atomic admission over every limit of one request: either all admit it and are charged, or
-- none is. Token limits and budgets grant the largest output reservation that fits now, up to
-- what was asked; the request is refused only when its prompt plus the least output
-- (ARGV[3]) does not fit. Redis server TIME, so replicas with skewed clocks agree.
-- KEYS[i]: the state key of limit i, then last the request's admission marker (it exists while
-- the charges are unsettled); all share the team's hash tag (Redis Cluster safe).
-- ARGV[1]: the request id; ARGV[2]: output tokens asked; ARGV[3]: the least output worth
-- admitting; ARGV[4]: the grant is a multiple of this (one cap per answer); ARGV[5]: the prompt's
-- tokens; ARGV[6]: every limit in one string (a client formats each argument it sends, so four
-- values per limit cost it far more as arguments than as words), "<kind> <a> <b> <cost> " per
-- limit, in KEYS' order:
--   kind "g" GCRA, for requests or tokens: a = rate, b = period (s)
--   kind "c" concurrency slots:            a = max in flight, b = lease (s)
--   kind "b" token or money budget:        a = quota, b = seconds to period end
--   cost "1": one per request; "t": the prompt and the output; "i": the prompt alone; "o": the
--   output alone; "$<p>x<w>": money, p nano-units for the prompt plus w per output token.
-- Money is integer nano-units (gateway/pricing.py) all the way: quotas are below 2^53, and what is
-- charged never exceeds what is left, so every sum and the quotient below are exact in a double.
-- Returns {allowed (0/1), index of the first refusing limit (0 if none), output granted,
--          index of the limit that bounded the grant (0 if none),
--          then per limit: remaining, reset_after (s, string), retry_after (s, string)}.
local time = redis.call("TIME")
-- Seconds since 2017 keep a double precise to the microsecond.
local now = (tonumber(time[1]) - 1483228800) + tonumber(time[2]) / 1000000
local asked, least, step = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local prompt = tonumber(ARGV[5])
local limits = #KEYS - 1
-- Per limit: its kind, a, b, fixed cost p and w (1: the output counts too, 0: it does not).
local kinds, as, bs, ps, ws = {}, {}, {}, {}, {}
local n = 0
for kind, a, b, cost in string.gmatch(ARGV[6], "(%a) (%S+) (%S+) (%S+) ") do
  n = n + 1
  kinds[n], as[n], bs[n] = kind, tonumber(a), tonumber(b)
  if cost == "1" then
    ps[n], ws[n] = 1, 0
  elseif cost == "t" then
    ps[n], ws[n] = prompt, 1
  elseif cost == "i" then
    ps[n], ws[n] = prompt, 0
  elseif cost == "o" then
    ps[n], ws[n] = 0, 1
  else
    local p, w = string.match(cost, "^%$(%d+)x(%d+)$")
    ps[n], ws[n] = tonumber(p), tonumber(w)
  end
end
if n ~= limits then
  return redis.error_reply("admit.lua: " .. n .. " limits described for " .. limits .. " keys")
end
local room, tats, used = {}, {}, {}
local denied, granted, bounded = 0, asked, 0
-- What each limit can take now; the first that cannot take the prompt and the least output
-- refuses. The epsilons absorb float error: 59.4 / 0.6 must count as 99, not 98.99999.
for i = 1, limits do
  local kind, a, b, p, w = kinds[i], as[i], bs[i], ps[i], ws[i]
  if kind == "g" then
    local tat = tonumber(redis.call("GET", KEYS[i]) or now)
    if tat < now then tat = now end
    tats[i] = tat
    room[i] = a - (tat - now) * a / b
  elseif kind == "c" then
    redis.call("ZREMRANGEBYSCORE", KEYS[i], "-inf", now)  -- leases of requests that never ended
    room[i] = a - redis.call("ZCARD", KEYS[i])
  else
    used[i] = tonumber(redis.call("GET", KEYS[i]) or 0)
    room[i] = a - used[i]
  end
  if denied == 0 and p + w * least > room[i] + 1e-6 then
    denied = i
  end
  if w == 1 and room[i] - p < granted then
    granted, bounded = math.max(0, math.floor(room[i] - p + 1e-6)), i
  elseif w > 1 and room[i] - p < granted * w then
    -- Money: integers, no epsilon (one token may cost less than it). The floor of an integer
    -- quotient below 2^53 is exact.
    granted, bounded = math.max(0, math.floor((room[i] - p) / w)), i
  end
end
granted = denied == 0 and granted - granted % step or 0
local out = {denied == 0 and 1 or 0, denied, granted, granted < asked and bounded or 0}
local lease = 0
for i = 1, limits do
  local kind, a, b = kinds[i], as[i], bs[i]
  local cost = ps[i] + ws[i] * (denied == 0 and granted or least)
  local remaining, reset_after, retry_after
  if kind == "g" then
    local emission = b / a
    if denied == 0 then
      local new_tat = tats[i] + emission * cost
      redis.call("SET", KEYS[i], tostring(new_tat), "EX", math.ceil(new_tat - now) + 1)
      remaining, reset_after, retry_after = room[i] - cost, new_tat - now, 0
    else
      remaining, reset_after = room[i], tats[i] - now
      retry_after = math.max(0, (cost - room[i]) * emission)
    end
  elseif kind == "c" then
    remaining, reset_after, retry_after = room[i] - (denied == 0 and 1 or 0), 0, room[i] >= 1 and 0 or 1
    if denied == 0 then
      redis.call("ZADD", KEYS[i], now + b, ARGV[1])
      lease = math.ceil(b) + 1
      redis.call("EXPIRE", KEYS[i], lease)
    end
  else
    remaining, reset_after = room[i] - (denied == 0 and cost or 0), b
    retry_after = cost > room[i] and b or 0
    if denied == 0 then
      redis.call("INCRBY", KEYS[i], cost)
      redis.call("EXPIRE", KEYS[i], math.ceil(b) + 3600)
    end
  end
  out[#out + 1] = math.max(0, math.floor(remaining + 1e-6))
  out[#out + 1] = tostring(reset_after)
  out[#out + 1] = tostring(retry_after)
end
if denied == 0 then
  -- Outlives every lease; a budget's or a minute's refund is worthless much later anyway. It
  -- holds the output granted: what a void settlement (settle.lua) gives back on top of the prompt.
  redis.call("SET", KEYS[#KEYS], granted, "EX", math.max(lease, 3600))
end
return out
