-- A validated batch starts: its lines are queued, counted against the team's queued lines.
-- KEYS: record, queued, pending
-- ARGV: total, max_lines (0: none), model, now (s), retain_at (s)
-- Returns 1 started, 0 not validating any more (cancelled meanwhile, or a second validator),
-- -1 refused: the team's queued lines would pass max_batch_lines.
if redis.call('HGET', KEYS[1], 'status') ~= 'validating' then
  return 0
end
local total = tonumber(ARGV[1])
local max_lines = tonumber(ARGV[2])
local queued = tonumber(redis.call('GET', KEYS[2]) or '0')
if max_lines > 0 and queued + total > max_lines then
  return -1
end
redis.call('INCRBY', KEYS[2], total)
local chunk = {}
for line = 0, total - 1 do
  chunk[#chunk + 1] = line
  if #chunk == 1000 then
    redis.call('RPUSH', KEYS[3], unpack(chunk))
    chunk = {}
  end
end
if #chunk > 0 then
  redis.call('RPUSH', KEYS[3], unpack(chunk))
end
redis.call('EXPIREAT', KEYS[3], ARGV[5])
redis.call('HSET', KEYS[1], 'status', 'in_progress', 'total', total, 'model', ARGV[3], 'in_progress_at', ARGV[4])
return 1
