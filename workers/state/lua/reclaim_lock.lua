-- reclaim_lock: take a lock that is free or that the same owner holds already.
-- KEYS[1] lock key (string holding the owner's token).
-- ARGV[1] owner token; ARGV[2] TTL (ms).
-- Atomically: SET the lock to ARGV[1] with the TTL when no one holds it, or, when it holds ARGV[1]
-- already, give it the TTL from now. For an owner that names one piece of work (an evolution job)
-- whose earlier run was killed holding the lock: its next run goes on at once instead of waiting
-- out the TTL behind itself; another owner's lock is left alone.
-- Returns 1 when taken, 0 when another owner holds it.

if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
