-- trial_record: count one attempt of a version on trial, or of its parent, once per attempt id.
-- KEYS[1] trial hash {es, ef, ps, pf}: evolved/parent successes/failures since the promotion;
-- KEYS[2] idempotency key of this attempt's trial count;
-- KEYS[3] (optional) the trial's judged hash {call_id|role: how its output counts}.
-- ARGV[1] idempotency TTL (s); ARGV[2] the field to increment (es | ef | ps | pf);
-- ARGV[3], ARGV[4] (with KEYS[3]) the member for this call and role, and how its output
-- counts: 'counted' (a success), 'negative' (a success a person judged wrong, counted as a
-- failure) or 'positive' (one judged right); judge_count.lua moves it when a judgement comes.
-- Atomically: SET NX the idempotency key and, only when it was set, HINCRBY the field by 1 and
-- note the member (the judged hash lives ARGV[1] seconds from its last note).
-- Returns {counted 1|0, es, ef, ps, pf} (the counts after this attempt).

local counted = 0
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  if KEYS[3] then
    redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])
    redis.call('EXPIRE', KEYS[3], ARGV[1])
  end
  counted = 1
end
local v = redis.call('HMGET', KEYS[1], 'es', 'ef', 'ps', 'pf')
return {counted, tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[4]) or 0}
