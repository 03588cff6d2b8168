-- set_weights: store new selection weights under the next version number.
-- KEYS[1] weights version counter; KEYS[2] current weights (string, JSON); KEYS[3] weights history
--         (list, newest first); KEYS[4] state version counter.
-- ARGV[1] the weights as a JSON object WITHOUT "version" (it starts with '{' and has a field);
-- ARGV[2] how many history entries to keep.
-- Atomically: INCR the version, splice it into the JSON as its first field, SET it as current,
-- LPUSH it onto the history, LTRIM the history to ARGV[2] entries, INCR the state version.
-- Returns the stored JSON (with its version).

local version = redis.call('INCR', KEYS[1])
local doc = '{"version":' .. string.format('%d', version) .. ',' .. string.sub(ARGV[1], 2)
redis.call('SET', KEYS[2], doc)
redis.call('LPUSH', KEYS[3], doc)
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[2]) - 1)
redis.call('INCR', KEYS[4])
return doc
