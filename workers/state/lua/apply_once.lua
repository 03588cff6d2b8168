-- apply_once: run a batch of writes at most once, however often the same batch is sent.
-- KEYS[1] the batch's token key (workers/state/once.py makes one per batch);
-- KEYS[i + 1] the key that command i writes.
-- ARGV[1] seconds the token is kept; then, for each command i in order: its name, the number n of
-- its arguments after its key, and those n arguments (n stays under Lua's unpack limit, ~8,000).
-- Atomically: SET NX EX of the token. If it was there, a copy of this batch ran already (the
-- client sent it again after a timeout although the stalled server ran the first copy, or a flush
-- whose reply was lost was sent again): nothing runs and 0 is returned. Otherwise every command
-- runs, in order, and 1 is returned.

if not redis.call('SET', KEYS[1], 1, 'NX', 'EX', tonumber(ARGV[1])) then
  return 0
end

local a = 2
for k = 2, #KEYS do
  local name, n = ARGV[a], tonumber(ARGV[a + 1])
  redis.call(name, KEYS[k], unpack(ARGV, a + 2, a + 1 + n))
  a = a + 2 + n
end
return 1
