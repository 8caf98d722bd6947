-- A batch whose lines are all answered (or stopped, and its running lines finished) moves to
-- finalizing; returns what it will end as ('completed', 'cancelled', 'expired'), or '' not yet.
-- A stopped batch (cancelled, or past its window) no longer claims lines, so the claim script
-- never reaps its leases: a lease that ran out here (its replica died mid-line) is dropped now,
-- uncounted from the team's queued lines, or the batch would wait for it forever.
-- KEYS: record, pending, leases, owners, running, queued, results
-- ARGV: now (s), now (ms), batch id
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'finalizing' then
  return redis.call('HGET', KEYS[1], 'ending')
end
if status ~= 'in_progress' and status ~= 'cancelling' then
  return ''
end
local stopped = status == 'cancelling' or redis.call('HEXISTS', KEYS[1], 'expiring') == 1
if stopped then
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[2])
  for _, line in ipairs(lapsed) do
    redis.call('ZREM', KEYS[3], line)
    redis.call('HDEL', KEYS[4], line)
    redis.call('ZREM', KEYS[5], ARGV[3] .. ':' .. line)
    if redis.call('HEXISTS', KEYS[7], line) == 0 and tonumber(redis.call('DECR', KEYS[6])) < 0 then
      redis.call('SET', KEYS[6], 0)
    end
  end
end
if redis.call('LLEN', KEYS[2]) > 0 or redis.call('ZCARD', KEYS[3]) > 0 then
  return ''
end
local ending = 'completed'
if status == 'cancelling' then
  ending = 'cancelled'
elseif redis.call('HEXISTS', KEYS[1], 'expiring') == 1
  and redis.call('HLEN', KEYS[7]) < tonumber(redis.call('HGET', KEYS[1], 'total') or '0') then
  -- Past its window with lines never run; a batch whose every line was answered by then (the
  -- window's end raced its last answer) completed.
  ending = 'expired'
end
redis.call('HSET', KEYS[1], 'status', 'finalizing', 'finalizing_at', ARGV[1], 'ending', ending)
return ending
