-- Renews this replica's leases on lines it is still running.
-- KEYS: leases, owners, running
-- ARGV: until (ms), token, batch id, line...
local renewed = 0
for i = 4, #ARGV do
  local line = ARGV[i]
  if redis.call('HGET', KEYS[2], line) == ARGV[2] then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[1], line)
    redis.call('ZADD', KEYS[3], 'XX', ARGV[1], ARGV[3] .. ':' .. line)
    renewed = renewed + 1
  end
end
return renewed
