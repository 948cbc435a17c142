-- Sluice: one admission of one key, atomically, on Redis's clock (microseconds).
-- KEYS[1] request rate arrival time; KEYS[2] token windows (hash: mt, ml, dt, dl: arrival
-- time and the limit it was computed under, per window); KEYS[3] leases (sorted set:
-- lease id -> expiry). All three share the key's hash tag.
-- ARGV: requests per minute, burst, tokens per minute, tokens per day, estimate,
-- max concurrent, lease id, lease lifetime (us). 0 means "no such limit".
-- Returns {verdict, wait_us, rate_remaining, rate_reset_us, token_window, token_limit,
-- token_remaining, token_reset_us, reserved_minute, reserved_day}; verdict 0 admitted,
-- 1 request rate, 2 concurrency, 3 tokens; token_window 0 none, 1 minute, 2 day.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local per_minute, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local limits = {tonumber(ARGV[3]), tonumber(ARGV[4])}
local estimate, max_concurrent = tonumber(ARGV[5]), tonumber(ARGV[6])
local lease, lifetime = ARGV[7], tonumber(ARGV[8])
local periods = {60000000, 86400000000}
local prefixes = {'m', 'd'}
local function int(x) return string.format('%.0f', x) end

local rate_tat, rate_remaining, rate_reset, rate_wait = nil, -1, 0, 0
if per_minute > 0 then
  local interval = 60000000 / per_minute
  local window = interval * burst
  local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
  local after = math.max(tat, now) + interval
  local held = after
  if after - now > window then
    rate_wait = after - now - window
    held = tat
  else
    rate_tat = after
  end
  local backlog = math.max(held - now, 0)
  rate_remaining = math.floor((window - backlog) / interval)
  rate_reset = backlog
end

local buckets = {}
local token_wait = 0
for i = 1, 2 do
  local limit = limits[i]
  if limit > 0 then
    local period = periods[i]
    local tat = tonumber(redis.call('HGET', KEYS[2], prefixes[i] .. 't') or '0')
    local was = tonumber(redis.call('HGET', KEYS[2], prefixes[i] .. 'l') or '0')
    if was > 0 and was ~= limit then
      -- A changed limit keeps the tokens the window holds.
      local held = math.floor(math.max(tat - now, 0) * was / period)
      tat = now + held * period / limit
    end
    local tokens = math.min(estimate, limit)
    local after = math.max(tat, now) + tokens * period / limit
    local wait = math.max(after - now - period, 0)
    token_wait = math.max(token_wait, wait)
    buckets[i] = {tat = tat, after = after, limit = limit, period = period, tokens = tokens, wait = wait}
  end
end

local in_flight = 0
if max_concurrent > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  in_flight = redis.call('ZCARD', KEYS[3])
end

local verdict, wait = 0, 0
if rate_wait > 0 then
  verdict, wait = 1, rate_wait
elseif max_concurrent > 0 and in_flight >= max_concurrent then
  verdict, wait = 2, 0
elseif token_wait > 0 then
  verdict, wait = 3, token_wait
end

if verdict == 0 then
  if rate_tat then
    redis.call('SET', KEYS[1], int(rate_tat), 'PX', math.ceil((rate_tat - now) / 1000) + 1000)
  end
  local longest = 0
  for i = 1, 2 do
    local b = buckets[i]
    if b then
      redis.call('HSET', KEYS[2], prefixes[i] .. 't', int(b.after), prefixes[i] .. 'l', b.limit)
      longest = math.max(longest, b.after - now)
    end
  end
  if longest > 0 then
    redis.call('PEXPIRE', KEYS[2], math.ceil(longest / 1000) + 1000)
  end
  if max_concurrent > 0 then
    redis.call('ZADD', KEYS[3], int(now + lifetime), lease)
    redis.call('PEXPIRE', KEYS[3], math.ceil(lifetime / 1000) + 1000)
  end
end

-- The window with the fewest tokens left, as the headers show it.
local window, token_limit, token_remaining, token_reset = 0, 0, 0, 0
for i = 1, 2 do
  local b = buckets[i]
  if b then
    local tat = b.tat
    if verdict == 0 then tat = b.after end
    local backlog = math.max(tat - now, 0)
    local remaining = math.floor(math.max(b.period - backlog, 0) * b.limit / b.period)
    if window == 0 or remaining < token_remaining then
      window, token_limit, token_remaining, token_reset = i, b.limit, remaining, backlog
    end
  end
end
local reserved = {-1, -1}
for i = 1, 2 do
  if buckets[i] then reserved[i] = buckets[i].tokens end
end
return {verdict, math.ceil(wait), rate_remaining, math.ceil(rate_reset), window, token_limit,
  token_remaining, math.ceil(token_reset), reserved[1], reserved[2]}
