-- queued_calls: which calls have a message waiting in a queue of the broker.
-- KEYS the queue's lists (kombu's Redis transport keeps one per priority step).
-- ARGV[1] the most messages to read; ARGV[2..] call task ids.
-- Reads every list in one pass inside Redis, so no payload crosses the network, and takes each
-- message's own id where kombu writes it in its headers ("id": "<task id>"; a child task names
-- its parent as "parent_id", which does not match): one match per message, looked up among the
-- ids, so the pass costs the same for one overdue call as for hundreds.
-- Returns the ids of ARGV found, or false when the lists hold more than ARGV[1] messages (a
-- backlog that long is not read: the caller treats every call as possibly waiting).

local total = 0
for _, key in ipairs(KEYS) do
  total = total + redis.call('LLEN', key)
end
if total > tonumber(ARGV[1]) then
  return false
end
local wanted, found = {}, {}
for i = 2, #ARGV do
  wanted[ARGV[i]] = true
end
for _, key in ipairs(KEYS) do
  for _, message in ipairs(redis.call('LRANGE', key, 0, -1)) do
    local id = string.match(message, '"id": "([^"]+)"')
    if id and wanted[id] then
      found[#found + 1] = id
      wanted[id] = nil
    end
  end
end
return found
