-- promote_if: change a namespace's promotion only if it is still the one the caller decided on
-- (compare-and-set), so a trial verdict, a rollback and a new promotion never overwrite each other.
-- KEYS[1] current promotion of the namespace (string, JSON); KEYS[2] promotion history (list,
--         oldest first); KEYS[3] state version counter; KEYS[4] promotions version counter.
-- ARGV[1] expected evolved_version of the current promotion ('': none is expected, the namespace
--         was never promoted); ARGV[2] expected statuses, comma separated (e.g. 'on_trial' or
--         'on_trial,active'); ARGV[3] new promotion JSON; ARGV[4] how many history entries to keep.
-- Atomically: GET and decode the current promotion; unless it exists with that evolved_version
-- and one of those statuses (or, for '', does not exist), change nothing. Otherwise SET the new
-- one, RPUSH it onto the history, LTRIM the history, INCR the state version and the promotions
-- version.
-- Returns 1 when changed, 0 otherwise.

local raw = redis.call('GET', KEYS[1])
if (not raw) ~= (ARGV[1] == '') then
  return 0
end
if raw then
  local current = cjson.decode(raw)
  if current['evolved_version'] ~= ARGV[1] then
    return 0
  end
  local wanted = false
  for status in string.gmatch(ARGV[2], '[^,]+') do
    if current['status'] == status then
      wanted = true
    end
  end
  if not wanted then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('RPUSH', KEYS[2], ARGV[3])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[4]), -1)
redis.call('INCR', KEYS[3])
redis.call('INCR', KEYS[4])
return 1
