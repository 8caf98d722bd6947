-- A batch whose lines are all answered (or stopped, and its running lines finished) moves to
-- finalizing; returns what it will end as ('completed', 'cancelled', 'expired'), or '' not yet.
-- KEYS: record, pending, leases
-- ARGV: now (s)
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'finalizing' then
  return redis.call('HGET', KEYS[1], 'ending')
end
if status ~= 'in_progress' and status ~= 'cancelling' then
  return ''
end
if redis.call('LLEN', KEYS[2]) > 0 or redis.call('ZCARD', KEYS[3]) > 0 then
  return ''
end
local ending = 'completed'
if status == 'cancelling' then
  ending = 'cancelled'
elseif redis.call('HEXISTS', KEYS[1], 'expiring') == 1 then
  ending = 'expired'
end
redis.call('HSET', KEYS[1], 'status', 'finalizing', 'finalizing_at', ARGV[1], 'ending', ending)
return ending
