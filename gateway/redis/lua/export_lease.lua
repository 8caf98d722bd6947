-- One replica at a time exports what is the same for all of them (gateway/metering/budget_gauge.py):
-- the holder renews its lease; anyone takes a lease that lapsed (its holder died or stalled).
-- KEYS[1]: the lease; ARGV[1]: this replica's id; ARGV[2]: the lease, in milliseconds.
-- Returns 1 when this replica holds the lease now, else 0.
local holder = redis.call("GET", KEYS[1])
if holder == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return 1
end
if not holder and redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return 1
end
return 0
