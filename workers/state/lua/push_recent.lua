-- push_recent: push one record onto a capped list of recent records, once per attempt id.
-- Two lists use it: a tool version's recent successful runs (workers/state/evolution.py,
-- SuccessfulRun) and the learner's window of execution records, failures included
-- (workers/state/learning.py, ExecutionRecord).
-- KEYS[1] the list of recent records (JSON, newest first); KEYS[2] idempotency key.
-- ARGV[1] idempotency TTL (s); ARGV[2] the record as JSON; ARGV[3] how many records to keep.
-- Atomically: SET NX the idempotency key and, only when it was set, LPUSH the record and LTRIM the
-- list to the newest ARGV[3] entries.
-- Returns 1 when pushed, 0 when this attempt was pushed before.

if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  return 0
end
redis.call('LPUSH', KEYS[1], ARGV[2])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
return 1
