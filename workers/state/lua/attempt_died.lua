-- attempt_died: count one death of the worker process that was running an attempt.
-- KEYS[1] hash {deaths: how often, reason: how the last one died, ms: how long it had run};
-- KEYS[2] this record's token key (workers/state/once.py: one per death recorded).
-- ARGV[1] how the process died (billiard's words, e.g. "signal 11 (SIGSEGV)"); ARGV[2] how long
-- the attempt had run (ms); ARGV[3] how long the record is kept (s); ARGV[4] how long the token is.
-- Atomically: SET NX of the token, then HINCRBY deaths, HSET the last reason and run time, and
-- (re)set the TTL, so that two worker processes recording deaths of the same attempt count both,
-- and no record outlives its TTL. A record sent again (the client's retry after a timeout, which
-- a stalled server may have run) finds its token and counts nothing.
-- Returns the number of deaths recorded for the attempt, this one included.

if not redis.call('SET', KEYS[2], 1, 'NX', 'EX', tonumber(ARGV[4])) then
  return tonumber(redis.call('HGET', KEYS[1], 'deaths') or '0')
end
local deaths = redis.call('HINCRBY', KEYS[1], 'deaths', 1)
redis.call('HSET', KEYS[1], 'reason', ARGV[1], 'ms', ARGV[2])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return deaths
