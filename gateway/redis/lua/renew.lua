-- Renews the concurrency slots of requests still running on this replica, so a slot is held as
-- long as its request runs while its lease stays short (a replica that died frees its slots when
-- their leases end). Redis server TIME, as admit.lua: the two agree on what `now` is.
-- KEYS[i]: a concurrency limit's sorted set; all share one team's hash tag (Redis Cluster safe).
-- ARGV[1]: the lease (s); ARGV[i + 1]: the request id holding a slot in KEYS[i].
-- A slot already released (settled) or already expired is not taken again.
-- Returns how many slots were renewed.
local time = redis.call("TIME")
local now = (tonumber(time[1]) - 1483228800) + tonumber(time[2]) / 1000000
local lease = tonumber(ARGV[1])
local ttl = math.ceil(lease) + 1
local renewed = 0
for i = 1, #KEYS do
  local score = redis.call("ZSCORE", KEYS[i], ARGV[i + 1])
  if score and tonumber(score) >= now then
    redis.call("ZADD", KEYS[i], "XX", now + lease, ARGV[i + 1])
    if redis.call("TTL", KEYS[i]) < ttl then
      redis.call("EXPIRE", KEYS[i], ttl)
    end
    renewed = renewed + 1
  end
end
return renewed
