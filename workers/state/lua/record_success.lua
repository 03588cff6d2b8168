-- record_success: count one successful attempt of a tool version, at most once per attempt id.
-- KEYS[1] tool hash {quality_bp, successes, failures, refused_inputs, refused_in_a_row, judged_wrong}; KEYS[2]
--         idempotency key of this attempt's outcome (a success or a failure, once: mark_failure.lua).
-- ARGV[1] idempotency TTL (s).
-- Atomically: SET NX the idempotency key and, only when it was set, HINCRBY successes 1 and end
-- the version's run of refused inputs (refused_in_a_row, mark_failure.lua).
-- Quality does not change on success, so the state version is left alone.
-- Returns 1 when counted, 0 when this attempt id was counted before, as a success or a failure.

if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'successes', 1)
redis.call('HDEL', KEYS[1], 'refused_in_a_row')
return 1
