-- One line of a batch claimed for this replica, under a lease; lines whose lease ran out (their
-- replica died) go back to the front of the queue first, unless their answer was written.
-- A line whose lease ran out after a cancel or the window's end is dropped (not run again).
-- KEYS: record, pending, leases, owners, results, running, queued
-- ARGV: now (ms), lease (ms), token, max_inflight (0: none), batch id, retain_at (s)
-- Returns {1, line}, or {0} nothing to claim, {-1} the team's running lines are at max_inflight,
-- {-2} the batch does not run lines now.
local now = tonumber(ARGV[1])
local status = redis.call('HGET', KEYS[1], 'status')
local runs = status == 'in_progress' and redis.call('HEXISTS', KEYS[1], 'expiring') == 0
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, line in ipairs(expired) do
  redis.call('ZREM', KEYS[3], line)
  redis.call('HDEL', KEYS[4], line)
  redis.call('ZREM', KEYS[6], ARGV[5] .. ':' .. line)
  if redis.call('HEXISTS', KEYS[5], line) == 0 then
    if runs then
      redis.call('LPUSH', KEYS[2], line)
    elseif tonumber(redis.call('DECR', KEYS[7])) < 0 then
      redis.call('SET', KEYS[7], 0)
    end
  end
end
if not runs then
  return {-2}
end
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
local max_inflight = tonumber(ARGV[4])
if max_inflight > 0 and redis.call('ZCARD', KEYS[6]) >= max_inflight then
  return {-1}
end
while true do
  local line = redis.call('LPOP', KEYS[2])
  if not line then
    return {0}
  end
  if redis.call('HEXISTS', KEYS[5], line) == 0 then
    local until_ms = now + tonumber(ARGV[2])
    redis.call('ZADD', KEYS[3], until_ms, line)
    redis.call('HSET', KEYS[4], line, ARGV[3])
    redis.call('ZADD', KEYS[6], until_ms, ARGV[5] .. ':' .. line)
    for i = 3, 4 do
      redis.call('EXPIREAT', KEYS[i], ARGV[6])
    end
    return {1, tonumber(line)}
  end
end
