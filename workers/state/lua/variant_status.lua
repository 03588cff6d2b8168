-- variant_status: change a description variant's status only from the status the caller saw
-- (compare-and-set), so two workers judging the same test cannot both act on it.
-- KEYS[1] variant status hash of a tool version {<id>: active | testing | deprecated}.
-- ARGV[1] variant id; ARGV[2] expected status; ARGV[3] new status.
-- Atomically: HGET the status and HSET the new one only when it equals ARGV[2].
-- Returns 1 when changed, 0 otherwise.

if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
