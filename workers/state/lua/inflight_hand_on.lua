-- inflight_hand_on: record the step a call was handed on to, unless the call has ended or a later
-- step of it is recorded.
-- KEYS[1] hash: call task id -> step (JSON); KEYS[2] sorted set: call task id -> due time;
-- KEYS[3] the call's end marker (set by inflight_end.lua); KEYS[4] hash: call task id -> the
-- recorded step's hop.
-- ARGV[1] call task id; ARGV[2] the step as JSON; ARGV[3] due time (Unix seconds);
-- ARGV[4] "1" for a call's first step, recorded by the process that sent it: only while no step
-- of the call is recorded, since the worker that took it may have handed the call on already;
-- ARGV[5] the step's hop: how many times the call had been handed on when the step was sent.
-- Atomically: when the end marker is absent, (for a first step) no step is recorded and no higher
-- hop is recorded (a step recorded without one counts as hop 0), HSET the step and its hop and
-- ZADD its due time. Hand-ons and ends are buffered by different processes and may reach Redis in
-- any order: without the marker a late hand-on would bring back a call that had ended, to be swept
-- for nothing; without the hop an older hand-on would replace the step the call is at, and that
-- step, delivered again, would be ignored as passed. An equal hop is recorded: the same step
-- again (the sweep pushing back the due time of a step it sent again, or a step run twice).
-- Returns 1 when recorded, 0 when the call had ended, had moved on past this hop or, for a first
-- step, had moved on.

if redis.call('EXISTS', KEYS[3]) == 1 then
  return 0
end
if ARGV[4] == '1' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return 0
end
local recorded = tonumber(redis.call('HGET', KEYS[4], ARGV[1]) or '0')
if recorded > tonumber(ARGV[5]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[5])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1
