-- judge_count: a person's judgement of one call's output, in counts that took that output as a
-- success when it ran: a version's counters (judge_output), or a trial's (trial_judge).
-- KEYS[1] counts hash; KEYS[2] marks hash {member: how the output counts now: 'counted' (as it
--         ran, noted by trial_record.lua) | 'negative' | 'positive'}; KEYS[3] (optional, a
--         version's counters) the hash of the calls judged wrong before their success was counted
--         {call id: 1}, which record_success.lua reads.
-- ARGV[1] the member (the call, for a trial with its role); ARGV[2] this judgement ('negative' |
-- 'positive'); ARGV[3] the success field; ARGV[4] the failure field; ARGV[5] '1': only an output
-- the counts noted (a trial counts only its namespace's traffic; one whose outcome comes later is
-- counted as judged then), '0': any (every success is in a version's counters); ARGV[6] (optional)
-- a field that tallies the outputs judged wrong among the failure field's count, so that what
-- reads that count as failures that ran (mark_failure.lua's extra penalty) can leave them out;
-- ARGV[7] (with KEYS[3]) how long KEYS[3] is kept (s). An output judged wrong with no success to
-- move (its call's success not counted yet) is marked in KEYS[3], so that record_success.lua counts
-- that call's success as nothing, and a judgement of right again that finds the call's own mark
-- adds no success (its success is still to come): one call never counts as a success and a
-- failure, nor as two successes.
-- Atomically: compare with how the output counts and store this judgement; an output that counts
-- as a success and is now judged wrong moves one count from the success field to the failure
-- field, and one judged right again moves it back (never below 0), so a judgement sent twice, or
-- replaced by the same one, changes nothing more.
-- Returns {changed 1|0, the counts hash as field, value, ...} (after it).

local before = redis.call('HGET', KEYS[2], ARGV[1])
local changed = 0
if (before or ARGV[5] ~= '1') and before ~= ARGV[2] then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  if (before == 'negative') ~= (ARGV[2] == 'negative') then
    local from, to = ARGV[3], ARGV[4]
    if ARGV[2] ~= 'negative' then
      from, to = ARGV[4], ARGV[3]
    end
    local early = KEYS[3] and ARGV[2] ~= 'negative' and redis.call('HDEL', KEYS[3], ARGV[1]) == 1
    if (tonumber(redis.call('HGET', KEYS[1], from)) or 0) > 0 then
      redis.call('HINCRBY', KEYS[1], from, -1)
    elseif KEYS[3] and ARGV[2] == 'negative' then
      redis.call('HSET', KEYS[3], ARGV[1], 1)
      redis.call('EXPIRE', KEYS[3], tonumber(ARGV[7]))
    end
    if not early then
      redis.call('HINCRBY', KEYS[1], to, 1)
    end
    if ARGV[6] then
      if ARGV[2] == 'negative' then
        redis.call('HINCRBY', KEYS[1], ARGV[6], 1)
      elseif (tonumber(redis.call('HGET', KEYS[1], ARGV[6])) or 0) > 0 then
        redis.call('HINCRBY', KEYS[1], ARGV[6], -1)
      end
    end
    changed = 1
  end
end
return {changed, redis.call('HGETALL', KEYS[1])}
