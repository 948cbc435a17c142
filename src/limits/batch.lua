-- Sluice: one call for one key, atomically, on Redis's clock (microseconds). First the
-- settlements of requests that ended, then the admissions of requests that arrived, in
-- their order. A replica sends one call per key at a time; whatever gathers meanwhile
-- travels in the next.
-- KEYS[1] request rate arrival time; KEYS[2] token windows (hash: mt, ml, dt, dl: arrival
-- time and the limit it was computed under, per window); KEYS[3] leases (sorted set:
-- lease id -> expiry). All three share the key's hash tag.
-- ARGV: requests per minute, burst, tokens per minute, tokens per day, max concurrent,
-- lease lifetime (us), 0 meaning "no such limit"; then the number of settlements and four
-- values each: tokens reserved per minute, per day (-1: none), tokens used (-1: unknown,
-- the reservation stands), lease id ('': none); then the number of admissions and two
-- values each: estimate, lease id ('': none).
-- Returns ten values per admission: {verdict, wait_us, rate_remaining, rate_reset_us,
-- token_window, token_limit, token_remaining, token_reset_us, reserved_minute,
-- reserved_day}; verdict 0 admitted, 1 request rate, 2 concurrency, 3 tokens; token_window
-- 0 none, 1 minute, 2 day; reserved -1 for a window the key does not have.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local per_minute, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local limits = {tonumber(ARGV[3]), tonumber(ARGV[4])}
local max_concurrent, lifetime = tonumber(ARGV[5]), tonumber(ARGV[6])
local periods = {60000000, 86400000000}
local function int(x) return string.format('%.0f', x) end

-- The token windows as stored: arrival time and the limit it was computed under.
local stored = redis.call('HMGET', KEYS[2], 'mt', 'ml', 'dt', 'dl')
local windows = {}
for i = 1, 2 do
  windows[i] = {tat = tonumber(stored[2 * i - 1] or '0'), limit = tonumber(stored[2 * i] or '0'),
    dirty = false}
end

-- Settlements: refund what was over-reserved, take what went beyond it (into debt if need
-- be), under the limit the reservation was made with; give the leases back.
local settlements = tonumber(ARGV[7])
local returned = {}
local at = 8
for _ = 1, settlements do
  local reserved = {tonumber(ARGV[at]), tonumber(ARGV[at + 1])}
  local used, lease = tonumber(ARGV[at + 2]), ARGV[at + 3]
  at = at + 4
  if used >= 0 then
    for i = 1, 2 do
      local w = windows[i]
      if reserved[i] >= 0 and w.limit > 0 then
        local held, owed = reserved[i] * periods[i] / w.limit, used * periods[i] / w.limit
        if owed < held then
          w.tat = w.tat - (held - owed)
        else
          w.tat = math.max(w.tat, now) + (owed - held)
        end
        w.dirty = true
      end
    end
  end
  if lease ~= '' then returned[#returned + 1] = lease end
end
if #returned > 0 then
  redis.call('ZREM', KEYS[3], unpack(returned))
end

-- A changed limit keeps the tokens the window holds.
for i = 1, 2 do
  local w, limit = windows[i], limits[i]
  if limit > 0 and w.limit > 0 and w.limit ~= limit then
    local held = math.floor(math.max(w.tat - now, 0) * w.limit / periods[i])
    w.tat = now + held * periods[i] / limit
  end
  if limit > 0 then w.limit = limit end
end

local admissions = tonumber(ARGV[at])
at = at + 1
local interval, window, rate_tat, rate_dirty = 0, 0, 0, false
if per_minute > 0 and admissions > 0 then
  interval = 60000000 / per_minute
  window = interval * burst
  rate_tat = tonumber(redis.call('GET', KEYS[1]) or '0')
end
local in_flight = 0
if max_concurrent > 0 and admissions > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  in_flight = redis.call('ZCARD', KEYS[3])
end

local answers = {}
local taken = {}
for _ = 1, admissions do
  local estimate, lease = tonumber(ARGV[at]), ARGV[at + 1]
  at = at + 2

  local rate_after, rate_remaining, rate_reset, rate_wait = nil, -1, 0, 0
  if per_minute > 0 then
    local after = math.max(rate_tat, now) + interval
    local held = after
    if after - now > window then
      rate_wait = after - now - window
      held = rate_tat
    else
      rate_after = after
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
      local tokens = math.min(estimate, limit)
      local after = math.max(windows[i].tat, now) + tokens * periods[i] / limit
      token_wait = math.max(token_wait, after - now - periods[i])
      buckets[i] = {after = after, tokens = tokens}
    end
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
    if rate_after then
      rate_tat, rate_dirty = rate_after, true
    end
    for i = 1, 2 do
      if buckets[i] then
        windows[i].tat, windows[i].dirty = buckets[i].after, true
      end
    end
    if max_concurrent > 0 and lease ~= '' then
      in_flight = in_flight + 1
      taken[#taken + 1] = int(now + lifetime)
      taken[#taken + 1] = lease
    end
  end

  -- The window with the fewest tokens left, as the headers show it.
  local shown, token_limit, token_remaining, token_reset = 0, 0, 0, 0
  local reserved = {-1, -1}
  for i = 1, 2 do
    if buckets[i] then
      reserved[i] = buckets[i].tokens
      local backlog = math.max(windows[i].tat - now, 0)
      local remaining = math.floor(math.max(periods[i] - backlog, 0) * limits[i] / periods[i])
      if shown == 0 or remaining < token_remaining then
        shown, token_limit, token_remaining, token_reset = i, limits[i], remaining, backlog
      end
    end
  end
  local answer = {verdict, math.ceil(wait), rate_remaining, math.ceil(rate_reset), shown,
    token_limit, token_remaining, math.ceil(token_reset), reserved[1], reserved[2]}
  for _, value in ipairs(answer) do answers[#answers + 1] = value end
end

if rate_dirty then
  redis.call('SET', KEYS[1], int(rate_tat), 'PX', math.ceil((rate_tat - now) / 1000) + 1000)
end
local fields, longest = {}, 0
local names = {'m', 'd'}
for i = 1, 2 do
  local w = windows[i]
  if w.dirty then
    fields[#fields + 1] = names[i] .. 't'
    fields[#fields + 1] = int(w.tat)
    fields[#fields + 1] = names[i] .. 'l'
    fields[#fields + 1] = w.limit
  end
  if w.limit > 0 then longest = math.max(longest, w.tat - now) end
end
if #fields > 0 then
  redis.call('HSET', KEYS[2], unpack(fields))
  if longest > 0 then
    redis.call('PEXPIRE', KEYS[2], math.ceil(longest / 1000) + 1000)
  end
end
if #taken > 0 then
  redis.call('ZADD', KEYS[3], unpack(taken))
  redis.call('PEXPIRE', KEYS[3], math.ceil(lifetime / 1000) + 1000)
end
return answers
