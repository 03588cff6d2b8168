-- forgive_failures: give back what some failures of one tool version cost, each at most once.
-- KEYS[1] tool hash {quality_bp, failures, judged_wrong}; KEYS[2] state version counter;
--         KEYS[3..] one idempotency key per failure forgiven (its attempt id).
-- ARGV[1] idempotency TTL (s); ARGV[2] quality bp of a version never scored (full quality);
-- ARGV[3..] the quality bp each failure took off when it was counted, in the order of KEYS[3..].
-- Atomically: for each failure whose key SET NX takes (a second forgiveness changes nothing) while
-- the version has failures that ran (failures - judged_wrong > 0): quality += its cost, at most
-- full quality, and failures -= 1 (later failures cost the extra of their count without it); INCR
-- the state version once if any was given back.
-- Returns the number of failures given back.

local q = tonumber(redis.call('HGET', KEYS[1], 'quality_bp')) or tonumber(ARGV[2])
local f = tonumber(redis.call('HGET', KEYS[1], 'failures')) or 0
local judged = tonumber(redis.call('HGET', KEYS[1], 'judged_wrong')) or 0
local given = 0
for k = 3, #KEYS do
  if f - judged > 0 and redis.call('SET', KEYS[k], '1', 'NX', 'EX', ARGV[1]) then
    q = math.min(tonumber(ARGV[2]), q + tonumber(ARGV[k]))
    f = f - 1
    given = given + 1
  end
end
if given > 0 then
  redis.call('HSET', KEYS[1], 'quality_bp', string.format('%d', q), 'failures', string.format('%d', f))
  redis.call('INCR', KEYS[2])
end
return given
