-- queued_calls: which calls have a message waiting in a queue of the broker.
-- KEYS the queue's lists (kombu's Redis transport keeps one per priority step).
-- ARGV[1] the most messages to read; ARGV[2..] call task ids.
-- Reads every list in one pass inside Redis, so no payload crosses the network, and matches each
-- message against the ids as kombu writes a message's own id in its headers ("id": "<task id>";
-- a child task names its parent as "parent_id", which does not match).
-- Returns the ids of ARGV found, or false when the lists hold more than ARGV[1] messages (a
-- backlog that long is not read: the caller treats every call as possibly waiting).

local total = 0
for _, key in ipairs(KEYS) do
  total = total + redis.call('LLEN', key)
end
if total > tonumber(ARGV[1]) then
  return false
end
local patterns, found = {}, {}
for i = 2, #ARGV do
  patterns[i] = '"id": "' .. ARGV[i] .. '"'
end
for _, key in ipairs(KEYS) do
  for _, message in ipairs(redis.call('LRANGE', key, 0, -1)) do
    for i = 2, #ARGV do
      if not found[i] and string.find(message, patterns[i], 1, true) then
        found[i] = true
      end
    end
  end
end
local out = {}
for i = 2, #ARGV do
  if found[i] then
    out[#out + 1] = ARGV[i]
  end
end
return out
