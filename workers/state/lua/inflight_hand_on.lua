-- inflight_hand_on: record the step a call was handed on to, unless the call has ended.
-- KEYS[1] hash: call task id -> step (JSON); KEYS[2] sorted set: call task id -> due time;
-- KEYS[3] the call's end marker (set by inflight_end.lua).
-- ARGV[1] call task id; ARGV[2] the step as JSON; ARGV[3] due time (Unix seconds);
-- ARGV[4] "1" for a call's first step, recorded by the process that sent it: only while no step
-- of the call is recorded, since the worker that took it may have handed the call on already.
-- Atomically: when the end marker is absent (and, for a first step, no step is recorded), HSET the
-- step and ZADD its due time. Hand-ons and ends are buffered by different processes and may reach
-- Redis in either order; without the marker a late hand-on would bring back a call that had
-- ended, to be swept for nothing.
-- Returns 1 when recorded, 0 when the call had ended or, for a first step, had moved on.

if redis.call('EXISTS', KEYS[3]) == 1 then
  return 0
end
if ARGV[4] == '1' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1
