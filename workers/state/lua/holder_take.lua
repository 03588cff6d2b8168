-- holder_take: take the messages of a worker that stopped beating, once.
-- KEYS[1] sorted set: holder -> Redis time (s) of its last beat; KEYS[2] set: the holder's tags.
-- ARGV[1] the holder; ARGV[2] how long without a beat makes a worker dead (s).
-- Atomically: if the holder's last beat is older than ARGV[2] by the server's TIME, ZREM it and
-- SMEMBERS then DEL its set, so that a sweeper takes its tags exactly once and a holder that beat
-- meanwhile (it was only slow) keeps them.
-- Returns the holder's tags, or false when it is alive (or already taken).

local beat = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not beat then
  return false
end
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
if t - tonumber(beat) < tonumber(ARGV[2]) then
  return false
end
redis.call('ZREM', KEYS[1], ARGV[1])
local tags = redis.call('SMEMBERS', KEYS[2])
redis.call('DEL', KEYS[2])
return tags
