-- changelog_unless_repeated: append an entry to a namespace's changelog unless it repeats what the
-- namespace's latest outcomes say while nothing else happened (a version no mutator answers; a
-- mutation skipped as failed before, then the no_fix it ends in, call after call).
-- KEYS[1] the namespace's changelog (ChangelogEntry JSON, oldest first); KEYS[2] the entry's token
-- key (workers/state/once.py: one token per entry sent).
-- ARGV[1] seconds the token is kept; ARGV[2] the entry as JSON; ARGV[3] how many entries to keep;
-- ARGV[4] how many of the latest entries to look back at, at most; ARGV[5] the events that repeat,
-- space-separated; ARGV[6..11] the entry's event, version, parent, mutator, mutation and reason
-- ('' for none).
-- Atomically: when the token is set, a copy of this entry sent again after a timeout ran already:
-- nothing changes, and the first copy's answer is returned. Otherwise the latest entries are read
-- back, newest first, while their event is one of ARGV[5] (at most ARGV[4] of them); when one has
-- the same event, version, parent, mutator, mutation and reason, the entry is not logged. Else it
-- is RPUSHed and the list LTRIMmed to the newest ARGV[3]. Then the token is SET EX to the answer.
-- Two calls logging the same entry at the same moment thus log it once, and any other event logged
-- between (a verified version, a promotion) has it logged again.
-- Returns 1 when the entry was logged, 0 when it repeated.

local sent = redis.call('GET', KEYS[2])
if sent then
  return tonumber(sent)
end

local function text(value)
  if value == nil or value == cjson.null then
    return ''
  end
  return tostring(value)
end

local repeating = {}
for event in string.gmatch(ARGV[5], '%S+') do
  repeating[event] = true
end

local logged = 1
local latest = redis.call('LRANGE', KEYS[1], -tonumber(ARGV[4]), -1)
for i = #latest, 1, -1 do
  local entry = cjson.decode(latest[i])
  if not repeating[text(entry.event)] then
    break
  end
  if text(entry.event) == ARGV[6] and text(entry.version) == ARGV[7] and text(entry.parent) == ARGV[8]
      and text(entry.mutator) == ARGV[9] and text(entry.mutation) == ARGV[10] and text(entry.reason) == ARGV[11] then
    logged = 0
    break
  end
end
if logged == 1 then
  redis.call('RPUSH', KEYS[1], ARGV[2])
  redis.call('LTRIM', KEYS[1], -tonumber(ARGV[3]), -1)
end
redis.call('SET', KEYS[2], logged, 'EX', tonumber(ARGV[1]))
return logged
