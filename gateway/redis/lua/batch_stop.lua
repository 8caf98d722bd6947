-- A cancel, or the completion window's end: no new line starts (the queue is emptied, its lines
-- no longer counted as the team's queued ones); lines in flight finish and are kept.
-- KEYS: record, pending, queued
-- ARGV: 'cancelling' | 'expiring', now (s)
-- Returns the record's status before, or '' for no batch.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  return ''
end
if status ~= 'in_progress' and status ~= 'validating' then
  return status
end
local left = redis.call('LLEN', KEYS[2])
redis.call('DEL', KEYS[2])
if left > 0 and tonumber(redis.call('DECRBY', KEYS[3], left)) < 0 then
  redis.call('SET', KEYS[3], 0)
end
if ARGV[1] == 'cancelling' then
  redis.call('HSET', KEYS[1], 'status', 'cancelling', 'cancelling_at', ARGV[2])
else
  redis.call('HSET', KEYS[1], 'status', 'in_progress', 'expiring', ARGV[2])
end
return status
