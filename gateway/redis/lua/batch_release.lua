-- A claimed line given back to the queue: never started (the pool got busy, the replica stops),
-- or a worker failure to retry (ARGV[4] = 1 counts a try; a line that used its retry is not given
-- back: returns -1). After a cancel or the window's end it is dropped instead (not run again).
-- KEYS: leases, owners, running, pending, tries, record, queued
-- ARGV: line, token, batch id, count a try (0|1), tries allowed
local line = ARGV[1]
if redis.call('HGET', KEYS[2], line) ~= ARGV[2] then
  return 0
end
local runs = redis.call('HGET', KEYS[6], 'status') == 'in_progress'
  and redis.call('HEXISTS', KEYS[6], 'expiring') == 0
if runs and ARGV[4] == '1' then
  local tries = tonumber(redis.call('HGET', KEYS[5], line) or '0')
  if tries >= tonumber(ARGV[5]) then
    return -1
  end
  redis.call('HINCRBY', KEYS[5], line, 1)
end
redis.call('ZREM', KEYS[1], line)
redis.call('HDEL', KEYS[2], line)
redis.call('ZREM', KEYS[3], ARGV[3] .. ':' .. line)
if not runs then
  if tonumber(redis.call('DECR', KEYS[7])) < 0 then
    redis.call('SET', KEYS[7], 0)
  end
elseif ARGV[4] == '1' then
  redis.call('RPUSH', KEYS[4], line)
else
  redis.call('LPUSH', KEYS[4], line)
end
return 1
