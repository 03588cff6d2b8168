-- set_weights: store new selection weights under the next version number, with the tool
-- classifier they were refitted with, if any.
-- KEYS[1] weights version counter; KEYS[2] current weights (string, JSON); KEYS[3] weights history
--         (list, newest first); KEYS[4] state version counter; KEYS[5] tool classifier (string);
--         KEYS[6] this change's token key (workers/state/once.py).
-- ARGV[1] the weights as a JSON object WITHOUT "version" (it starts with '{' and has a field);
-- ARGV[2] how many history entries to keep; ARGV[3] the classifier as text, "" to keep the stored
-- one; ARGV[4] how long the token is kept (s).
-- Atomically: SET NX of the token (a copy sent again after a timeout, which a stalled server ran
-- too, finds it, changes nothing and returns the current weights); then INCR the version, splice
-- it into the JSON as its first field, SET it as current, LPUSH it onto the history, LTRIM the
-- history to ARGV[2] entries, SET the classifier when one is given, INCR the state version. A
-- reader never sees new weights naming a classifier not yet stored.
-- Returns the stored JSON (with its version).

if not redis.call('SET', KEYS[6], 1, 'NX', 'EX', tonumber(ARGV[4])) then
  return redis.call('GET', KEYS[2])
end
local version = redis.call('INCR', KEYS[1])
local doc = '{"version":' .. string.format('%d', version) .. ',' .. string.sub(ARGV[1], 2)
redis.call('SET', KEYS[2], doc)
redis.call('LPUSH', KEYS[3], doc)
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[2]) - 1)
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[5], ARGV[3])
end
redis.call('INCR', KEYS[4])
return doc
