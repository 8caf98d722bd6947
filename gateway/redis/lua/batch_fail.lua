-- A batch its validation failed: only while it is still validating (a cancel that came first
-- stands; the cancelled batch is not turned into a failed one).
-- KEYS: record
-- ARGV: now (s), errors (JSON)
-- Returns 1 failed, 0 not validating any more.
if redis.call('HGET', KEYS[1], 'status') ~= 'validating' then
  return 0
end
redis.call('HSET', KEYS[1], 'status', 'failed', 'failed_at', ARGV[1], 'errors', ARGV[2])
return 1
