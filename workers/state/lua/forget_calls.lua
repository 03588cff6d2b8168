-- forget_calls: remove every record of some calls from lists of JSON records.
-- The lists: each tool version's recent successful runs (SuccessfulRun), the learner's window
-- (ExecutionRecord), and the vector writes waiting for the store (PendingWrite, whose point's
-- payload names the call).
-- KEYS: the lists. ARGV: the call ids.
-- Atomically, per list: read it whole, and LREM each entry whose `call_id` (or `payload.call_id`)
-- is one of ARGV; entries that do not decode as JSON are left as they are.
-- Returns the number of entries removed from each list, in the order of KEYS.

local forgotten = {}
for _, call_id in ipairs(ARGV) do
  forgotten[call_id] = true
end

local removed = {}
for i, key in ipairs(KEYS) do
  local n = 0
  local gone = {}
  for _, raw in ipairs(redis.call('LRANGE', key, 0, -1)) do
    local ok, doc = pcall(cjson.decode, raw)
    if ok and type(doc) == 'table' then
      local call_id = doc['call_id']
      if call_id == nil and type(doc['payload']) == 'table' then
        call_id = doc['payload']['call_id']
      end
      if type(call_id) == 'string' and forgotten[call_id] and not gone[raw] then
        gone[raw] = true
        n = n + redis.call('LREM', key, 0, raw)
      end
    end
  end
  removed[i] = n
end
return removed
