-- Sluice: the end of one admitted request, on Redis's clock (microseconds).
-- KEYS[1] token windows (hash, as admit.lua writes it); KEYS[2] leases.
-- ARGV: tokens reserved per minute, per day (-1: none), tokens used (-1: unknown, the
-- reservation stands), lease id ('': none). Refunds what was over-reserved, takes what
-- went beyond it (into debt if need be), and gives the lease back.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local reserved = {tonumber(ARGV[1]), tonumber(ARGV[2])}
local used = tonumber(ARGV[3])
local periods = {60000000, 86400000000}
local prefixes = {'m', 'd'}
if used >= 0 then
  for i = 1, 2 do
    local limit = tonumber(redis.call('HGET', KEYS[1], prefixes[i] .. 'l') or '0')
    if reserved[i] >= 0 and limit > 0 then
      local period = periods[i]
      local tat = tonumber(redis.call('HGET', KEYS[1], prefixes[i] .. 't') or '0')
      local held, owed = reserved[i] * period / limit, used * period / limit
      if owed < held then
        tat = tat - (held - owed)
      else
        tat = math.max(tat, now) + (owed - held)
      end
      redis.call('HSET', KEYS[1], prefixes[i] .. 't', string.format('%.0f', tat))
      local left = tat - now
      if left > 0 then
        redis.call('PEXPIRE', KEYS[1], math.ceil(left / 1000) + 1000)
      end
    end
  end
end
if ARGV[4] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[4])
end
return 1
