-- note_namespaces: remember the namespaces served, and tell those added to a running system.
-- KEYS[1] namespaces ever served (set); KEYS[2] newcomers: namespace -> when it came (hash);
--         KEYS[3] state version counter; KEYS[4] promotions version counter.
-- ARGV[1] now (seconds); ARGV[2..] the namespaces served now.
-- Atomically: SADD each namespace; one that is new to a set that held others already is a
-- newcomer (HSET with ARGV[1]); the namespaces of a first catalog are not. When any newcomer
-- came, INCR the state version and the promotions version, so that selectors read them again.
-- Returns the newcomers.

local had = redis.call('SCARD', KEYS[1]) > 0
local newcomers = {}
for i = 2, #ARGV do
  if redis.call('SADD', KEYS[1], ARGV[i]) == 1 and had then
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[1])
    newcomers[#newcomers + 1] = ARGV[i]
  end
end
if #newcomers > 0 then
  redis.call('INCR', KEYS[4])
  redis.call('INCR', KEYS[3])
end
return newcomers
