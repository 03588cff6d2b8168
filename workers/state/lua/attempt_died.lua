-- attempt_died: count one death of the worker process that was running an attempt.
-- KEYS[1] hash {deaths: how often, reason: how the last one died, ms: how long it had run}.
-- ARGV[1] how the process died (billiard's words, e.g. "signal 11 (SIGSEGV)"); ARGV[2] how long
-- the attempt had run (ms); ARGV[3] how long the record is kept (s).
-- Atomically: HINCRBY deaths, HSET the last reason and run time, and (re)set the TTL, so that two
-- worker processes recording deaths of the same attempt count both, and no record outlives its TTL.
-- Returns the number of deaths recorded for the attempt, this one included.

local deaths = redis.call('HINCRBY', KEYS[1], 'deaths', 1)
redis.call('HSET', KEYS[1], 'reason', ARGV[1], 'ms', ARGV[2])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return deaths
