-- Moves a pointer (a key id's current secret hash) only if it still holds what the caller read:
-- of two rotations of one key, the second retries from the first's secret. One key
-- (gateway/keys/steps.py). KEYS[1]: the pointer. ARGV[1]: what it must hold; ARGV[2]: the new value.
-- Returns 1 when moved, 0 when it held something else (or nothing).
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call("SET", KEYS[1], ARGV[2], "KEEPTTL")
return 1
