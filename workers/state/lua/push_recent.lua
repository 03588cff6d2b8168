-- push_recent: remember one successful run of a tool version, once per attempt id.
-- KEYS[1] list of recent successful runs (JSON, newest first); KEYS[2] idempotency key.
-- ARGV[1] idempotency TTL (s); ARGV[2] the run as JSON; ARGV[3] how many runs to keep.
-- Atomically: SET NX the idempotency key and, only when it was set, LPUSH the run and LTRIM the
-- list to the newest ARGV[3] entries.
-- Returns 1 when pushed, 0 when this attempt was pushed before.

if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  return 0
end
redis.call('LPUSH', KEYS[1], ARGV[2])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
return 1
