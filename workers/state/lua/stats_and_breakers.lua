-- stats_and_breakers: what selection reads about N candidate tool versions, in one command.
-- KEYS[1..N] tool hashes {quality_bp, successes, failures, refused_inputs, refused_in_a_row};
--            KEYS[N+1..2N] the same versions'
--            breaker hashes {fails, open_until}; KEYS[2N+1..3N] their lists of recent run
--            durations in ms; all in the same order.
-- ARGV none.
-- Reads only (one command instead of 2N+1 in a pipeline: each costs the client ~30 us to pack and
-- parse, which showed up in selection's profile). Time is the Redis server's clock, as in
-- breaker_record.lua.
-- The 95th percentile of the recent durations is taken here (nearest rank, an observed value), so
-- that the attempt's adaptive timeout travels in the plan and the executor need not ask again.
-- Returns {now_ms, q_1, s_1, f_1, r_1, a_1, ..., q_N, s_N, f_N, r_N, a_N, open_until_1, ..., open_until_N,
-- runs_1, p95_1, ..., runs_N, p95_N}, each value a string or false when absent (p95 false when
-- there are no runs).

local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
local n = #KEYS / 3
for i = 1, n do
  local v = redis.call('HMGET', KEYS[i], 'quality_bp', 'successes', 'failures', 'refused_inputs', 'refused_in_a_row')
  for j = 1, 5 do
    out[#out + 1] = v[j]
  end
end
for i = n + 1, 2 * n do
  out[#out + 1] = redis.call('HGET', KEYS[i], 'open_until')
end
for i = 2 * n + 1, 3 * n do
  local runs = redis.call('LRANGE', KEYS[i], 0, -1)
  out[#out + 1] = tostring(#runs)
  if #runs == 0 then
    out[#out + 1] = false
  else
    local values = {}
    for j, v in ipairs(runs) do
      values[j] = tonumber(v)
    end
    table.sort(values)
    out[#out + 1] = string.format('%.17g', values[math.max(1, math.ceil(0.95 * #values))])
  end
end
return out
