-- breaker_record: feed one outcome of a tool version into its circuit breaker.
-- KEYS[1] breaker hash {fails: consecutive failures, open_until: ms since epoch};
-- KEYS[2] state version counter; KEYS[3] the idempotency key: the attempt's, or one token of
-- the caller's when it names no attempt (a pipeline re-sent after NOSCRIPT then feeds it once).
-- ARGV[1] '1' success | '0' failure; ARGV[2] threshold (consecutive failures that open it);
-- ARGV[3] cool-down in ms; ARGV[4] seconds the idempotency key is kept.
-- Time is the Redis server's clock (TIME), shared by every worker.
-- An attempt delivered twice feeds the breaker once. KEYS[3] holds what its first delivery
-- returned, and a copy gets that again with nothing changed: a probe run again after its worker
-- died before the memory worker heard of it still says 'recovered'. (A key written before it held
-- the outcome holds '1'; its copy gets 'skipped'.)
-- Atomically: a success deletes the breaker (closed). A failure increments `fails`; at or past the
-- threshold it (re)opens the breaker until now + cool-down, unless it is open and still cooling
-- down (late failures do not extend it). Opening and closing an open breaker INCR the state version.
-- Returns 'closed' or 'open' (the state after this outcome), 'recovered' for a success that closed
-- a breaker that had opened (its probe, or a run begun before it opened).

local first = redis.call('GET', KEYS[3])
if first == '1' then
  return 'skipped'
elseif first then
  return first
end

local function fed(state)
  redis.call('SET', KEYS[3], state, 'EX', tonumber(ARGV[4]))
  return state
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local open_until = tonumber(redis.call('HGET', KEYS[1], 'open_until'))

if ARGV[1] == '1' then
  redis.call('DEL', KEYS[1])
  if open_until then
    redis.call('INCR', KEYS[2])
    return fed('recovered')
  end
  return fed('closed')
end

local fails = redis.call('HINCRBY', KEYS[1], 'fails', 1)
if fails < tonumber(ARGV[2]) then
  return fed('closed')
end
if open_until and now < open_until then
  return fed('open')
end
redis.call('HSET', KEYS[1], 'open_until', string.format('%d', now + tonumber(ARGV[3])))
redis.call('INCR', KEYS[2])
return fed('open')
