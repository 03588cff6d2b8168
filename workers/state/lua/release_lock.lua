-- release_lock: compare-and-delete, so only the owner can release a lock.
-- KEYS[1] lock key (string holding the owner's token).
-- ARGV[1] owner token.
-- Atomically: GET the lock and DEL it only when it holds ARGV[1]; an expired lock, or one taken
-- since by another owner, is left alone.
-- Returns 1 when released, 0 otherwise.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
