-- variant_record: credit one call to the description variant it was served, once per call and tool.
-- KEYS[1] variant stats hash of a tool version {<id>:accesses, <id>:trials, <id>:successes};
-- KEYS[2] idempotency key of this call for this tool version.
-- ARGV[1] idempotency TTL (s); ARGV[2] variant id; ARGV[3] '1' when the variant made the match of
--         the call's first attempt (a trial), else '0'; ARGV[4] '1' when that attempt succeeded.
-- Atomically: SET NX the idempotency key and, only when it was set, HINCRBY accesses, and for a
-- trial HINCRBY trials and (on success) successes.
-- Returns 1 when credited, 0 when this call was credited before.

if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  return 0
end
redis.call('HINCRBY', KEYS[1], ARGV[2] .. ':accesses', 1)
if ARGV[3] == '1' then
  redis.call('HINCRBY', KEYS[1], ARGV[2] .. ':trials', 1)
  if ARGV[4] == '1' then
    redis.call('HINCRBY', KEYS[1], ARGV[2] .. ':successes', 1)
  end
end
return 1
