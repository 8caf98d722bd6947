-- A line's answer written, exactly once: only by the replica whose lease it is, in the same step
-- that releases the lease, so a line with an answer is never claimed again.
-- KEYS: record, leases, owners, results, running, queued
-- ARGV: line, token, outcome ('completed' | 'failed'), the output or error line, batch id,
--       input tokens, output tokens, retain_at (s)
local line = ARGV[1]
if redis.call('HGET', KEYS[3], line) ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[4], line, ARGV[4])
redis.call('EXPIREAT', KEYS[4], ARGV[8])
redis.call('ZREM', KEYS[2], line)
redis.call('HDEL', KEYS[3], line)
redis.call('ZREM', KEYS[5], ARGV[5] .. ':' .. line)
redis.call('HINCRBY', KEYS[1], ARGV[3], 1)
redis.call('HINCRBY', KEYS[1], 'usage.input_tokens', ARGV[6])
redis.call('HINCRBY', KEYS[1], 'usage.output_tokens', ARGV[7])
if tonumber(redis.call('DECR', KEYS[6])) < 0 then
  redis.call('SET', KEYS[6], 0)
end
return 1
