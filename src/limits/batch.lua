-- Sluice: one call for one key, atomically, on Redis's clock (microseconds). First the
-- settlements of requests that ended, then the leases this replica still holds, then the
-- admissions of requests that arrived, in their order: each decided on the key's request
-- rate, concurrency, token windows and money budgets (its own and its owner's) at once,
-- and refused without taking anything. A replica sends one call per key at a time;
-- whatever gathers meanwhile travels in the next.
-- KEYS[1] request rate arrival time; KEYS[2] token windows (hash: mt, ml, dt, dl: arrival
-- time and the limit it was computed under, per window); KEYS[3] leases (sorted set:
-- lease id -> expiry); then zero, one or two budget accounts, the key's own and then its
-- owner's (hash: ds, dm, ms, mm: the start, Unix ms, and the micro-dollars spent of the day
-- and of the month, on the replica's wall clock). All share one hash tag.
-- ARGV: requests per minute, burst, tokens per minute, tokens per day, max concurrent,
-- lease lifetime (us), 0 meaning "no such limit"; the start of the day and of the month
-- (Unix ms) and how long an account is kept after a reservation (ms); per budget account
-- its day and month limits (micro-dollars, -1: none); then the number of settlements and
-- four values each: tokens reserved per minute, per day (-1: none), tokens used (-1:
-- unknown, the reservation stands), lease id ('': none), and, for a key with budget
-- accounts, four more: money reserved (-1: none), money it cost, and the day's and
-- month's starts it was reserved in; then the number of leases to keep and their ids
-- (each held again for one lifetime, re-created if the store lost it); then the number of
-- admissions and two values each: estimate, lease id ('': none), and, for a key with
-- budget accounts, a third: its cost (micro-dollars; -1: nothing to reserve).
-- Returns ten values per admission: {verdict, wait_us, rate_remaining, rate_reset_us,
-- token_window, token_limit, token_remaining, token_reset_us, reserved_minute,
-- reserved_day}, and five more for a key with budget accounts: {budget_remaining,
-- budget_account, budget_window, budget_limit, budget_spent}. Verdict 0 admitted, 1
-- request rate, 2 concurrency, 3 tokens, 4 budget; token_window 0 none, 1 minute, 2 day;
-- reserved -1 for a window the key does not have; budget_remaining the micro-dollars the
-- tightest budget window has left (after the reservation if admitted); the last four name
-- the window a budget refusal is for (account 1-based, window 1 day, 2 month; 0
-- otherwise).
-- Every number handed to Redis is formatted as an integer, and no arrival time runs more
-- than its period plus seven days ahead of the clock, so no value overflows whatever a
-- settlement carries. Amounts of money arrive below 2^50 micro-dollars (the gateway caps
-- them), so sums of them stay exact in Lua's doubles.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local per_minute, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local limits = {tonumber(ARGV[3]), tonumber(ARGV[4])}
local max_concurrent, lifetime = tonumber(ARGV[5]), tonumber(ARGV[6])
local periods = {60000000, 86400000000}
local max_debt = 604800000000
local function int(x) return string.format('%.0f', math.floor(x)) end
local function bounded(tat, period) return math.min(tat, now + period + max_debt) end

-- The budget accounts as stored, and the limits of this call. An account whose day (or
-- month) is not the current one has spent nothing in the current one.
local day, month, account_ttl = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local accounts = {}
local at = 10
for a = 1, #KEYS - 3 do
  local v = redis.call('HMGET', KEYS[3 + a], 'ds', 'dm', 'ms', 'mm')
  accounts[a] = {ds = tonumber(v[1] or '-1'), dm = tonumber(v[2] or '0'),
    ms = tonumber(v[3] or '-1'), mm = tonumber(v[4] or '0'),
    limits = {tonumber(ARGV[at]), tonumber(ARGV[at + 1])}, dirty = false, reserved = false}
  at = at + 2
end
local budgeted = #accounts > 0
local function spent(account)
  local d, m = 0, 0
  if account.ds == day then d = account.dm end
  if account.ms == month then m = account.mm end
  return {d, m}
end

-- The token windows as stored: arrival time and the limit it was computed under. A window
-- the store no longer holds (drained and expired, or a store restarted empty) starts empty
-- under the limit of this call, so a settlement that comes late still applies.
local stored = redis.call('HMGET', KEYS[2], 'mt', 'ml', 'dt', 'dl')
local windows = {}
for i = 1, 2 do
  local w = {tat = tonumber(stored[2 * i - 1] or '0'), limit = tonumber(stored[2 * i] or '0'),
    dirty = false}
  if w.limit == 0 then w.tat, w.limit = 0, limits[i] end
  windows[i] = w
end

-- Settlements: refund what was over-reserved, take what went beyond it (into debt if need
-- be), under the window's limit; give the leases back.
local settlements = tonumber(ARGV[at])
local returned = {}
at = at + 1
for _ = 1, settlements do
  local reserved = {tonumber(ARGV[at]), tonumber(ARGV[at + 1])}
  local used, lease = tonumber(ARGV[at + 2]), ARGV[at + 3]
  local money, cost, money_day, money_month = -1, 0, 0, 0
  if budgeted then
    money, cost = tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5])
    money_day, money_month = tonumber(ARGV[at + 6]), tonumber(ARGV[at + 7])
    at = at + 4
  end
  at = at + 4
  -- Money: the reservation replaced by the cost, only in the windows it was made in (a
  -- window that has ended since, or an account the store lost, is left as it is).
  if money >= 0 then
    for _, account in ipairs(accounts) do
      if account.ds == money_day then
        account.dm, account.dirty = math.max(0, account.dm - money) + cost, true
      end
      if account.ms == money_month then
        account.mm, account.dirty = math.max(0, account.mm - money) + cost, true
      end
    end
  end
  if used >= 0 then
    for i = 1, 2 do
      local w = windows[i]
      if reserved[i] >= 0 and w.limit > 0 then
        local held, owed = reserved[i] * periods[i] / w.limit, used * periods[i] / w.limit
        if owed < held then
          w.tat = w.tat - (held - owed)
        else
          w.tat = bounded(math.max(w.tat, now) + (owed - held), periods[i])
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

-- Leases of requests still running on the replica: held one more lifetime, re-created if
-- the store lost them (restarted empty, failed over), so they count against the limit.
local kept = tonumber(ARGV[at])
at = at + 1
if kept > 0 then
  local members = {}
  for _ = 1, kept do
    members[#members + 1] = int(now + lifetime)
    members[#members + 1] = ARGV[at]
    at = at + 1
  end
  redis.call('ZADD', KEYS[3], unpack(members))
  redis.call('PEXPIRE', KEYS[3], int(math.ceil(lifetime / 1000) + 1000))
end

-- A changed limit keeps the tokens the window holds.
for i = 1, 2 do
  local w, limit = windows[i], limits[i]
  if limit > 0 and w.limit > 0 and w.limit ~= limit then
    local held = math.floor(math.max(w.tat - now, 0) * w.limit / periods[i])
    -- Stored at once, so the window drains at the new rate from now on.
    w.tat, w.dirty = bounded(now + held * periods[i] / limit, periods[i]), true
  end
  if limit > 0 then w.limit = limit end
end

local admissions = tonumber(ARGV[at])
at = at + 1
local interval, window, rate_tat, rate_dirty = 0, 0, 0, false
if per_minute > 0 and admissions > 0 then
  interval = 60000000 / per_minute
  window = interval * burst
  -- Never further ahead than the window under the limits of this call: a raised rate
  -- (a shorter window) must not leave a wait the new limits would never give.
  -- Stored at once when clamped, so the wait counts down at the new rate.
  local stored_tat = tonumber(redis.call('GET', KEYS[1]) or '0')
  rate_tat = math.min(stored_tat, now + window)
  rate_dirty = rate_tat < stored_tat
end
local in_flight = 0
if max_concurrent > 0 and admissions > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', int(now))
  in_flight = redis.call('ZCARD', KEYS[3])
end

local answers = {}
local taken = {}
for _ = 1, admissions do
  local estimate, lease, cost = tonumber(ARGV[at]), ARGV[at + 1], -1
  at = at + 2
  if budgeted then
    cost = tonumber(ARGV[at])
    at = at + 1
  end

  local rate_after, rate_wait = nil, 0
  if per_minute > 0 then
    local after = math.max(rate_tat, now) + interval
    if after - now > window then
      rate_wait = after - now - window
    else
      rate_after = after
    end
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

  -- Every budget window the cost would take over its limit; the one that stays shut
  -- longest is named (the month over the day, the owner's over the key's on a tie).
  local over = nil
  if budgeted and cost >= 0 then
    for a, account in ipairs(accounts) do
      local now_spent = spent(account)
      for w = 1, 2 do
        local limit = account.limits[w]
        if limit >= 0 and now_spent[w] + cost > limit then
          if over == nil or w >= over[2] then over = {a, w, limit, now_spent[w]} end
        end
      end
    end
  end

  local verdict, wait = 0, 0
  if rate_wait > 0 then
    verdict, wait = 1, rate_wait
  elseif max_concurrent > 0 and in_flight >= max_concurrent then
    verdict, wait = 2, 0
  elseif token_wait > 0 then
    verdict, wait = 3, token_wait
  elseif over then
    verdict = 4
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
    if cost >= 0 then
      for _, account in ipairs(accounts) do
        local before = spent(account)
        account.ds, account.dm = day, before[1] + cost
        account.ms, account.mm = month, before[2] + cost
        account.dirty, account.reserved = true, true
      end
    end
  end

  -- The rate's position after this request if admitted, without it if refused.
  local rate_remaining, rate_reset = -1, 0
  if per_minute > 0 then
    local backlog = math.min(math.max(rate_tat - now, 0), window)
    rate_remaining = math.max(math.floor((window - backlog) / interval), 0)
    rate_reset = backlog
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
  local n = #answers
  answers[n + 1], answers[n + 2], answers[n + 3] = verdict, math.ceil(math.min(wait, max_debt)),
    rate_remaining
  answers[n + 4], answers[n + 5], answers[n + 6] = math.ceil(rate_reset), shown, token_limit
  answers[n + 7] = token_remaining
  answers[n + 8] = math.ceil(math.min(token_reset, periods[2] + max_debt))
  answers[n + 9], answers[n + 10] = reserved[1], reserved[2]
  if budgeted then
    -- The tightest budget window: what it has left after this request if admitted,
    -- without it if refused.
    local budget_left = -1
    for _, account in ipairs(accounts) do
      local now_spent = spent(account)
      for w = 1, 2 do
        local limit = account.limits[w]
        if limit >= 0 then
          local left = math.max(0, limit - now_spent[w])
          if budget_left < 0 or left < budget_left then budget_left = left end
        end
      end
    end
    local refused = {0, 0, 0, 0}
    if verdict == 4 then refused = over end
    answers[n + 11], answers[n + 12], answers[n + 13] = budget_left, refused[1], refused[2]
    answers[n + 14], answers[n + 15] = refused[3], refused[4]
  end
end

if rate_dirty then
  redis.call('SET', KEYS[1], int(rate_tat), 'PX', int(math.ceil((rate_tat - now) / 1000) + 1000))
end
-- The windows live until their debt has drained: every write sets the time to live from
-- the longest backlog, so a window in debt is never forgotten before it is paid.
local fields, longest = {}, 0
local names = {'m', 'd'}
for i = 1, 2 do
  local w = windows[i]
  if w.dirty then
    fields[#fields + 1] = names[i] .. 't'
    fields[#fields + 1] = int(w.tat)
    fields[#fields + 1] = names[i] .. 'l'
    fields[#fields + 1] = int(w.limit)
  end
  if w.limit > 0 then longest = math.max(longest, w.tat - now) end
end
if #fields > 0 then
  redis.call('HSET', KEYS[2], unpack(fields))
  redis.call('PEXPIRE', KEYS[2], int(math.ceil(longest / 1000) + 1000))
end
if #taken > 0 then
  redis.call('ZADD', KEYS[3], unpack(taken))
  redis.call('PEXPIRE', KEYS[3], int(math.ceil(lifetime / 1000) + 1000))
end
-- An account is kept until a week after its month ends (from its last reservation), so
-- a late settlement still finds it; a settlement alone keeps the expiry it has.
for a, account in ipairs(accounts) do
  if account.dirty then
    redis.call('HSET', KEYS[3 + a], 'ds', int(account.ds), 'dm', int(account.dm),
      'ms', int(account.ms), 'mm', int(account.mm))
    if account.reserved then redis.call('PEXPIRE', KEYS[3 + a], int(account_ttl)) end
  end
end
return answers
