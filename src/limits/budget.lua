-- Sluice: money budgets of one key and its owner, in one call (docs/budgets.md). Both
-- accounts share one hash tag (the owner's, for a key that has one), so Redis Cluster runs
-- the call on one node, atomically.
-- KEYS: one or two accounts, each a hash: ds, dm (start and micro-dollars spent of the
-- day), ms, mm (of the month).
-- ARGV[1] mode: 'reserve', 'settle' or 'read'; ARGV[2] the day's start, ARGV[3] the
-- month's start (Unix ms, from the gateway's wall clock); ARGV[4] lifetime of an account
-- after its last change (ms).
-- reserve: ARGV[5] cost; then per account its day and month limits (-1: none). Returns
--   {refused (0/1), account (1-based), window (1 day, 2 month), limit, spent, remaining};
--   remaining is what the tightest window has left (after the reservation if admitted).
-- settle: ARGV[5] reserved, ARGV[6] cost. Returns {}.
-- read: returns the day and month spent of each account.
-- Amounts stay far below 2^53 (budgets are at most 10^15 micro-dollars).
local mode, day, month = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local lifetime = tonumber(ARGV[4])
local function int(x) return string.format('%.0f', x) end

local function spent_of(key)
  local v = redis.call('HMGET', key, 'ds', 'dm', 'ms', 'mm')
  local d, m = 0, 0
  if tonumber(v[1] or '-1') == day then d = tonumber(v[2] or '0') end
  if tonumber(v[3] or '-1') == month then m = tonumber(v[4] or '0') end
  return d, m
end

local function write(key, d, m)
  redis.call('HSET', key, 'ds', int(day), 'dm', int(d), 'ms', int(month), 'mm', int(m))
  redis.call('PEXPIRE', key, lifetime)
end

if mode == 'read' then
  local out = {}
  for i = 1, #KEYS do
    local d, m = spent_of(KEYS[i])
    out[#out + 1] = d
    out[#out + 1] = m
  end
  return out
end

if mode == 'settle' then
  -- Only in the windows the reservation was made in: a window that has ended since (or
  -- an account the store lost) is left as it is.
  local reserved, cost = tonumber(ARGV[5]), tonumber(ARGV[6])
  for i = 1, #KEYS do
    local v = redis.call('HMGET', KEYS[i], 'ds', 'dm', 'ms', 'mm')
    if tonumber(v[1] or '-1') == day then
      redis.call('HSET', KEYS[i], 'dm', int(math.max(0, tonumber(v[2]) - reserved) + cost))
    end
    if tonumber(v[3] or '-1') == month then
      redis.call('HSET', KEYS[i], 'mm', int(math.max(0, tonumber(v[4]) - reserved) + cost))
    end
  end
  return {}
end

local cost = tonumber(ARGV[5])
local spent, refused, remaining = {}, nil, -1
for i = 1, #KEYS do
  local d, m = spent_of(KEYS[i])
  spent[i] = {d, m}
  for w = 1, 2 do
    local limit = tonumber(ARGV[5 + 2 * (i - 1) + w])
    if limit >= 0 then
      local left = limit - spent[i][w] - cost
      if left < 0 then
        -- The month stays shut at least as long as the day: it is named when both are.
        if refused == nil or w >= refused[2] then refused = {i, w, limit, spent[i][w]} end
      end
      if remaining < 0 or left < remaining then remaining = left end
    end
  end
end
if refused then
  local now_left = -1
  for i = 1, #KEYS do
    for w = 1, 2 do
      local limit = tonumber(ARGV[5 + 2 * (i - 1) + w])
      if limit >= 0 then
        local left = math.max(0, limit - spent[i][w])
        if now_left < 0 or left < now_left then now_left = left end
      end
    end
  end
  return {1, refused[1], refused[2], refused[3], refused[4], now_left}
end
for i = 1, #KEYS do
  write(KEYS[i], spent[i][1] + cost, spent[i][2] + cost)
end
return {0, 0, 0, 0, 0, math.max(0, remaining)}
