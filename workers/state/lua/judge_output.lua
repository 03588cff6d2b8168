-- judge_output: a person's judgement of one call's output by a tool version, in its counters.
-- KEYS[1] tool hash {quality_bp, successes, failures}; KEYS[2] the judgement last applied for
--         this call and version ('negative' | 'positive'; kept as long as the counters).
-- ARGV[1] this judgement ('negative' | 'positive'); ARGV[2] '1' when the attempt succeeded as it
--         ran, '0' when it failed (a failure judged wrong was counted as one already).
-- Atomically: compare with the judgement last applied and store this one; an output that ran
-- well and is now judged wrong moves one count from successes to failures, and one judged right
-- again moves it back (never below 0), so a judgement sent twice, or replaced by the same one,
-- changes nothing more. Quality does not change, so the state version is left alone.
-- Returns 1 when the counters changed, 0 otherwise.

local before = redis.call('GET', KEYS[2])
if before == ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[1])
if ARGV[2] ~= '1' or (before == 'negative') == (ARGV[1] == 'negative') then
  return 0
end
local from, to = 'successes', 'failures'
if ARGV[1] ~= 'negative' then
  from, to = 'failures', 'successes'
end
if (tonumber(redis.call('HGET', KEYS[1], from)) or 0) > 0 then
  redis.call('HINCRBY', KEYS[1], from, -1)
end
redis.call('HINCRBY', KEYS[1], to, 1)
return 1
