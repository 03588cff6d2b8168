-- record_success: count one successful attempt of a tool version, at most once per attempt id.
-- KEYS[1] tool hash {quality_bp, successes, failures, refused_inputs, refused_in_a_row, judged_wrong};
--         KEYS[2] idempotency key of this attempt's outcome (a success or a failure, once:
--         mark_failure.lua); KEYS[3] the version's hash of the calls a person judged wrong before
--         their success was counted {call id: 1} (judge_count.lua).
-- ARGV[1] idempotency TTL (s); ARGV[2] the attempt's call id.
-- Atomically: SET NX the idempotency key and, only when it was set, end the version's run of
-- refused inputs (refused_in_a_row, mark_failure.lua) and HINCRBY successes 1, unless the call is
-- in KEYS[3] (taken out of it then): its judgement counted it a failure already.
-- Quality does not change on success, so the state version is left alone.
-- Returns 1 when this attempt id was taken now (counted, or counted as its judgement said), 0 when
-- it was taken before, as a success or a failure.

if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  return 0
end
redis.call('HDEL', KEYS[1], 'refused_in_a_row')
if redis.call('HDEL', KEYS[3], ARGV[2]) == 0 then
  redis.call('HINCRBY', KEYS[1], 'successes', 1)
end
return 1
