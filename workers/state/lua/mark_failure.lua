-- mark_failure: demote a tool version for one failed attempt, at most once per attempt id.
-- KEYS[1] tool hash {quality_bp, successes, failures, refused_inputs, refused_in_a_row, judged_wrong};
--         KEYS[2] idempotency key of this attempt's outcome (a success or a failure, once); KEYS[3] state version counter.
-- ARGV[1] idempotency TTL (s); ARGV[2] quality bp of a version never scored (full quality);
-- ARGV[3] base penalty bp of the severity; or "refused_input" for a refusal of an input that was
--         the caller's mistake, "not_its_job" for a fallback's refusal of another tool's job, or
--         "declared_refusal" for a refusal the version's test cases expect
--         (selection/models.py FailureCount); ARGV[4..] pairs (from_failure_count, extra_bp), ascending.
-- Atomically: SET NX the idempotency key (a second delivery changes nothing); then either
-- failures += 1, quality -= base + the extra of the last pair whose from_failure_count <= the
-- failures that ran (failures - judged_wrong: an output a person judged wrong is counted among the
-- failures, by judge_count.lua, but leaves quality as it was, and so the extra too) (floor 0), INCR
-- the state version; or, for the caller's mistake, refused_inputs += 1 and
-- refused_in_a_row += 1 (which a success ends: record_success.lua); or, for another tool's job or a
-- refusal its test cases expect, refused_inputs += 1 and INCR the state version (its failure, remembered near the job, is new
-- evidence for selection's cached searches). Neither touches a count that the extra of later
-- failures reads. The numbers come from selection/quality.py.
-- Returns {applied 1|0, quality bp, failures, quality bp before} (current values when not applied).

local function current()
  local v = redis.call('HMGET', KEYS[1], 'quality_bp', 'failures', 'judged_wrong')
  return tonumber(v[1]) or tonumber(ARGV[2]), tonumber(v[2]) or 0, tonumber(v[3]) or 0
end

if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  local q, f = current()
  return {0, q, f, q}
end

local q, f, judged = current()
if ARGV[3] == 'refused_input' then
  redis.call('HINCRBY', KEYS[1], 'refused_inputs', 1)
  redis.call('HINCRBY', KEYS[1], 'refused_in_a_row', 1)
  return {1, q, f, q}
end
if ARGV[3] == 'not_its_job' or ARGV[3] == 'declared_refusal' then
  redis.call('HINCRBY', KEYS[1], 'refused_inputs', 1)
  redis.call('INCR', KEYS[3])
  return {1, q, f, q}
end
local before = q
f = f + 1
local extra = 0
for i = 4, #ARGV - 1, 2 do
  if f - judged >= tonumber(ARGV[i]) then
    extra = tonumber(ARGV[i + 1])
  end
end
q = q - tonumber(ARGV[3]) - extra
if q < 0 then
  q = 0
end
redis.call('HSET', KEYS[1], 'quality_bp', string.format('%d', q), 'failures', string.format('%d', f))
redis.call('INCR', KEYS[3])
return {1, q, f, before}
