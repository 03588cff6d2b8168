-- promote: set which version of a namespace is served, and remember it.
-- KEYS[1] current promotion of the namespace (string, JSON); KEYS[2] promotion history of the
--         namespace (list, oldest first); KEYS[3] state version counter; KEYS[4] promotions
--         version counter; KEYS[5] this change's token key (workers/state/once.py).
-- ARGV[1] promotion JSON; ARGV[2] how many history entries to keep; ARGV[3] how long the token is
-- kept (s).
-- Atomically: SET NX of the token (a copy sent again after a timeout, which a stalled server ran
-- too, finds it and changes nothing: the state version is returned); then SET the current
-- promotion, RPUSH it onto the history, LTRIM the history to the newest ARGV[2] entries, INCR the
-- state version and the promotions version.
-- Returns the new state version.

if not redis.call('SET', KEYS[5], 1, 'NX', 'EX', tonumber(ARGV[3])) then
  return tonumber(redis.call('GET', KEYS[3]) or '0')
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[2]), -1)
redis.call('INCR', KEYS[4])
return redis.call('INCR', KEYS[3])
