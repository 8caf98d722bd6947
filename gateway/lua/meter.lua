-- Record one finished request's usage, exactly once per request id.
-- KEYS[1]: the request's idempotency marker; KEYS[2]: the team's usage hash for one UTC day;
-- KEYS[3]: the team's set of days with usage. All share the team's hash tag.
-- ARGV: marker_ttl, usage_ttl, day, field prefix "key_id|model", prompt, completion, error, disconnect
if not redis.call("SET", KEYS[1], "1", "NX", "EX", ARGV[1]) then
  return 0
end
local prefix = ARGV[4]
redis.call("HINCRBY", KEYS[2], prefix .. "|requests", 1)
redis.call("HINCRBY", KEYS[2], prefix .. "|prompt_tokens", ARGV[5])
redis.call("HINCRBY", KEYS[2], prefix .. "|completion_tokens", ARGV[6])
if ARGV[7] ~= "0" then redis.call("HINCRBY", KEYS[2], prefix .. "|errors", 1) end
if ARGV[8] ~= "0" then redis.call("HINCRBY", KEYS[2], prefix .. "|disconnects", 1) end
redis.call("EXPIRE", KEYS[2], ARGV[2])
redis.call("SADD", KEYS[3], ARGV[3])
return 1
