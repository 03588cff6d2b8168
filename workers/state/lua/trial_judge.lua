-- trial_judge: a person's judgement of one call's output, in the trial that counted the call.
-- KEYS[1] trial hash {es, ef, ps, pf}; KEYS[2] the trial's judged hash {call_id|role (evolved |
--         parent): how its output counts: 'counted' | 'negative' | 'positive'}, noted by
--         trial_record.lua.
-- ARGV[1] the member (call_id|role); ARGV[2] this judgement ('negative' | 'positive');
-- ARGV[3] the role's success field (es | ps); ARGV[4] its failure field (ef | pf).
-- Atomically: a call the trial did not count (not its traffic, or its outcome not applied yet:
-- trial_record.lua then counts it as judged) changes nothing. Otherwise compare with how its output
-- counts and store this judgement; an output counted as a success and now judged wrong moves one
-- count from the success field to the failure field, and one judged right again moves it back
-- (never below 0), so a judgement sent twice, or replaced by the same one, changes nothing more.
-- Returns {changed 1|0, es, ef, ps, pf} (the counts after it).

local before = redis.call('HGET', KEYS[2], ARGV[1])
local changed = 0
if before and before ~= ARGV[2] then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  if (before == 'negative') ~= (ARGV[2] == 'negative') then
    local from, to = ARGV[3], ARGV[4]
    if ARGV[2] ~= 'negative' then
      from, to = ARGV[4], ARGV[3]
    end
    if (tonumber(redis.call('HGET', KEYS[1], from)) or 0) > 0 then
      redis.call('HINCRBY', KEYS[1], from, -1)
    end
    redis.call('HINCRBY', KEYS[1], to, 1)
    changed = 1
  end
end
local v = redis.call('HMGET', KEYS[1], 'es', 'ef', 'ps', 'pf')
return {changed, tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[4]) or 0}
