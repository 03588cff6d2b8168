-- inflight_end: forget a call that has its result, and keep a late hand-on from recording it again.
-- KEYS[1] hash: call task id -> step (JSON); KEYS[2] sorted set: call task id -> due time;
-- KEYS[3] the call's end marker; KEYS[4] hash: call task id -> the recorded step's hop.
-- ARGV[1] call task id; ARGV[2] how long the marker lives (s), longer than any buffered write waits.
-- Atomically: SET the marker with its TTL, HDEL the step and its hop and ZREM its due time.
-- Returns 1 when the call was still recorded, 0 otherwise.

redis.call('SET', KEYS[3], '1', 'EX', ARGV[2])
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return redis.call('ZREM', KEYS[2], ARGV[1])
