-- holder_beat: a live worker says which broker messages it holds, and when it last said so.
-- KEYS[1] sorted set: holder -> Redis time (s) of its last beat; KEYS[2] set: the delivery tags the
-- holder holds (kombu's `unacked` hash fields).
-- ARGV[1] the holder (worker name, pid and a per-start token); ARGV[2] how long the set lives (s):
-- past the visibility timeout, after which the broker gives the messages back itself;
-- ARGV[3] 1 when ARGV[4..] are the tags the worker holds now (its channel's unacknowledged
-- deliveries), 0 when it cannot tell (its channel reconnects): its claims so far stand.
-- Atomically: ZADD the beat at the server's TIME (one clock for every host), replace the set with
-- the tags and (re)set its TTL, so a sweeper never reads a fresh beat beside a set it replaces.
-- Returns the beat's time.

local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZADD', KEYS[1], t, ARGV[1])
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[2])
  for i = 4, #ARGV, 500 do
    redis.call('SADD', KEYS[2], unpack(ARGV, i, math.min(i + 499, #ARGV)))
  end
end
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
return tostring(t)
