-- Settle one finished request, exactly once per request id: meter its usage, give back what its
-- admission reserved beyond what it used (or charge the excess), release its concurrency slots.
-- KEYS[1]: the request's idempotency marker; KEYS[2]: the team's usage hash for one UTC day;
-- KEYS[3]: the team's set of days with usage; KEYS[4]: the admission marker (admit.lua);
-- KEYS[5]: the team's hash of when each key was last used;
-- KEYS[6..]: limit state keys to settle. All share the team's hash tag (Redis Cluster safe).
-- ARGV[1..9]: marker_ttl, usage_ttl, day, field prefix "key_id|model|api" ("key_id|model" from a
-- record spooled before usage had the api), prompt, completion, error,
-- disconnect, void; ARGV[10]: "<kind> <a> " per limit key, in KEYS' order, in one string (a client
-- formats each argument it sends on its own: two per limit cost it more as arguments than as words)
-- void = "1": an admission whose reply was lost (the client was refused): give back what it
-- charged, only if admit.lua did charge it (its marker exists, holding the output it granted),
-- and meter nothing.
--   "g" token GCRA: a = "<seconds per token>:<tokens to give back>" (negative: charge more)
--   "c" concurrency: a = the request id to release
--   "b" budget:      a = tokens to give back (negative: charge more)
-- In a void, tokens to give back may end in ":1": plus the output the marker says was granted;
-- a money budget's in ":1:<w>": plus that output times w nano-units (its price a token).
-- ARGV[11]: what the request cost, in integer nano-units ("0": nothing, or not recorded). Handed to
-- HINCRBY as the digits it came as, never through a Lua number (a double).
local time = redis.call("TIME")
local now = (tonumber(time[1]) - 1483228800) + tonumber(time[2]) / 1000000
local kinds, values, listed = {}, {}, 5
for kind, a in string.gmatch(ARGV[10], "(%a) (%S+) ") do
  listed = listed + 1
  kinds[listed], values[listed] = kind, a
end
if listed ~= #KEYS then
  return redis.error_reply("settle.lua: " .. (listed - 5) .. " settlements described for " .. (#KEYS - 5) .. " keys")
end
local granted = 0
local function tokens(text)
  local n, plus, w = string.match(text, "^([^:]+):?([^:]*):?(.*)$")
  return tonumber(n) + (plus == "1" and granted * (tonumber(w) or 1) or 0)
end
if ARGV[9] == "1" then
  granted = tonumber(redis.call("GET", KEYS[4]))
  if not granted then
    return 0
  end
  redis.call("DEL", KEYS[4])
else
  if not redis.call("SET", KEYS[1], "1", "NX", "EX", ARGV[1]) then
    return 0
  end
  redis.call("DEL", KEYS[4])
  local prefix = ARGV[4]
  redis.call("HINCRBY", KEYS[2], prefix .. "|requests", 1)
  redis.call("HINCRBY", KEYS[2], prefix .. "|prompt_tokens", ARGV[5])
  redis.call("HINCRBY", KEYS[2], prefix .. "|completion_tokens", ARGV[6])
  if ARGV[7] ~= "0" then redis.call("HINCRBY", KEYS[2], prefix .. "|errors", 1) end
  if ARGV[8] ~= "0" then redis.call("HINCRBY", KEYS[2], prefix .. "|disconnects", 1) end
  if ARGV[11] ~= "0" then redis.call("HINCRBY", KEYS[2], prefix .. "|cost_nano", ARGV[11]) end
  redis.call("EXPIRE", KEYS[2], ARGV[2])
  redis.call("SADD", KEYS[3], ARGV[3])
  -- The key id leads the field prefix. Redis's clock, like every other time the scripts keep.
  redis.call("HSET", KEYS[5], string.match(prefix, "^[^|]*"), time[1])
  redis.call("EXPIRE", KEYS[5], ARGV[2])
end

for i = 6, #KEYS do
  local kind, a = kinds[i], values[i]
  if kind == "g" then
    local sep = string.find(a, ":", 1, true)
    local emission, give_back = tonumber(string.sub(a, 1, sep - 1)), tokens(string.sub(a, sep + 1))
    local tat = tonumber(redis.call("GET", KEYS[i]))
    if tat then
      tat = tat - emission * give_back
      if tat > now then
        redis.call("SET", KEYS[i], tostring(tat), "EX", math.ceil(tat - now) + 1)
      else
        redis.call("DEL", KEYS[i])
      end
    end
  elseif kind == "c" then
    redis.call("ZREM", KEYS[i], a)
  elseif redis.call("EXISTS", KEYS[i]) == 1 then  -- a budget whose period has not rolled over
    redis.call("DECRBY", KEYS[i], tokens(a))
  end
end
return 1
