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
-- its day and month limits (micro-dollars, -1: none). Then six packed arguments, where a
-- number is 8 bytes, little-endian, signed, and a lease id is 33 bytes:
-- the settlements, four numbers each: tokens reserved per minute, per day (-1: none),
-- tokens used (-1: unknown, the reservation stands), whether it gives a lease back (1 or
-- 0), and, for a key with budget accounts, four more: money reserved (-1: none), money it
-- cost, and the day's and month's starts it was reserved in; the lease ids they give
-- back, in their order; the lease ids to keep (each held again for one lifetime,
-- re-created if the store lost it); the admissions, two numbers each: estimate, whether
-- it takes a lease (1 or 0), and, for a key with budget accounts, a third: its cost
-- (micro-dollars; -1: nothing to reserve); and the lease ids they take, in their order.
-- Returns one string: ten numbers per admission, packed as above: {verdict, wait_us,
-- rate_remaining, rate_reset_us, token_window, token_limit, token_remaining,
-- token_reset_us, reserved_minute, reserved_day}, and five more for a key with budget
-- accounts: {budget_remaining, budget_account, budget_window, budget_limit, budget_spent}.
-- Verdict 0 admitted, 1 request rate, 2 concurrency, 3 tokens, 4 budget; token_window 0
-- none, 1 minute, 2 day; reserved -1 for a window the key does not have; budget_remaining
-- the micro-dollars the tightest budget window has left (after the reservation if
-- admitted); the last four name the window a budget refusal is for (account 1-based,
-- window 1 day, 2 month; 0 otherwise).
-- Every number handed to Redis is formatted as an integer (its floor, by '%d': Lua's
-- '%.0f' cost several times more), and no arrival time runs more than its period plus
-- seven days ahead of the clock, so no value overflows whatever a settlement carries. Amounts of money arrive below 2^50 micro-dollars (the gateway caps them), so
-- sums of them stay exact in Lua's doubles.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local unpack_numbers, pack_numbers, sub = struct.unpack, struct.pack, string.sub
local per_minute, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local limits = {tonumber(ARGV[3]), tonumber(ARGV[4])}
local max_concurrent, lifetime = tonumber(ARGV[5]), tonumber(ARGV[6])
local periods = {60000000, 86400000000}
local max_debt = 604800000000
local lease_bytes = 33
local function int(x) return string.format('%d', floor(x)) end
-- How many records of `size` bytes `packed` holds; a length that is not a whole number
-- of them is refused (the call fails, and only it).
local function count(packed, size)
  local n = #packed / size
  if n ~= floor(n) then error('sluice: a packed argument has a partial record') end
  return n
end

-- The budget accounts as stored, and the limits of this call. An account whose day (or
-- month) is not the current one has spent nothing in the current one.
local day, month, account_ttl = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local accounts = {}
local at = 10
for a = 1, #KEYS - 3 do
  local v = redis.call('HMGET', KEYS[3 + a], 'ds', 'dm', 'ms', 'mm')
  accounts[a] = {ds = tonumber(v[1] or '-1'), dm = tonumber(v[2] or '0'),
    ms = tonumber(v[3] or '-1'), mm = tonumber(v[4] or '0'),
    day_limit = tonumber(ARGV[at]), month_limit = tonumber(ARGV[at + 1]),
    dirty = false, reserved = false}
  at = at + 2
end
local account_count = #accounts
local budgeted = account_count > 0
local function spent(account)
  local d, m = 0, 0
  if account.ds == day then d = account.dm end
  if account.ms == month then m = account.mm end
  return d, m
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
local settled, settled_leases = ARGV[at], ARGV[at + 1]
at = at + 2
local settlement_format = budgeted and '<i8i8i8i8i8i8i8i8' or '<i8i8i8i8'
local settlements = count(settled, budgeted and 64 or 32)
local returned = {}
local position, lease_at = 1, 1
for _ = 1, settlements do
  local reserved_minute, reserved_day, used, leased, money, cost, money_day, money_month
  if budgeted then
    reserved_minute, reserved_day, used, leased, money, cost, money_day, money_month,
      position = unpack_numbers(settlement_format, settled, position)
  else
    reserved_minute, reserved_day, used, leased, position =
      unpack_numbers(settlement_format, settled, position)
    money = -1
  end
  -- Money: the reservation replaced by the cost, only in the windows it was made in (a
  -- window that has ended since, or an account the store lost, is left as it is).
  if money >= 0 then
    for a = 1, account_count do
      local account = accounts[a]
      if account.ds == money_day then
        account.dm, account.dirty = max(0, account.dm - money) + cost, true
      end
      if account.ms == money_month then
        account.mm, account.dirty = max(0, account.mm - money) + cost, true
      end
    end
  end
  if used >= 0 then
    for i = 1, 2 do
      local w, reserved = windows[i], reserved_minute
      if i == 2 then reserved = reserved_day end
      if reserved >= 0 and w.limit > 0 then
        local held, owed = reserved * periods[i] / w.limit, used * periods[i] / w.limit
        if owed < held then
          w.tat = w.tat - (held - owed)
        else
          w.tat = min(max(w.tat, now) + (owed - held), now + periods[i] + max_debt)
        end
        w.dirty = true
      end
    end
  end
  if leased == 1 then
    returned[#returned + 1] = sub(settled_leases, lease_at, lease_at + lease_bytes - 1)
    lease_at = lease_at + lease_bytes
  end
end
if #returned > 0 then
  redis.call('ZREM', KEYS[3], unpack(returned))
end

-- Leases of requests still running on the replica: held one more lifetime, re-created if
-- the store lost them (restarted empty, failed over), so they count against the limit.
local kept_leases = ARGV[at]
at = at + 1
local kept = count(kept_leases, lease_bytes)
if kept > 0 then
  local members = {}
  local expiry = int(now + lifetime)
  for i = 1, kept do
    members[#members + 1] = expiry
    members[#members + 1] = sub(kept_leases, (i - 1) * lease_bytes + 1, i * lease_bytes)
  end
  redis.call('ZADD', KEYS[3], unpack(members))
  redis.call('PEXPIRE', KEYS[3], int(ceil(lifetime / 1000) + 1000))
end

-- A changed limit keeps the tokens the window holds.
for i = 1, 2 do
  local w, limit = windows[i], limits[i]
  if limit > 0 and w.limit > 0 and w.limit ~= limit then
    local held = floor(max(w.tat - now, 0) * w.limit / periods[i])
    -- Stored at once, so the window drains at the new rate from now on.
    w.tat, w.dirty = min(now + held * periods[i] / limit, now + periods[i] + max_debt), true
  end
  if limit > 0 then w.limit = limit end
end

local admitting, admitted_leases = ARGV[at], ARGV[at + 1]
local admission_format = budgeted and '<i8i8i8' or '<i8i8'
local admissions = count(admitting, budgeted and 24 or 16)
local interval, window, rate_tat, rate_dirty = 0, 0, 0, false
if per_minute > 0 and admissions > 0 then
  interval = 60000000 / per_minute
  window = interval * burst
  -- Never further ahead than the window under the limits of this call: a raised rate
  -- (a shorter window) must not leave a wait the new limits would never give.
  -- Stored at once when clamped, so the wait counts down at the new rate.
  local stored_tat = tonumber(redis.call('GET', KEYS[1]) or '0')
  rate_tat = min(stored_tat, now + window)
  rate_dirty = rate_tat < stored_tat
end
local in_flight = 0
if max_concurrent > 0 and admissions > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', int(now))
  in_flight = redis.call('ZCARD', KEYS[3])
end

local minute, whole_day = windows[1], windows[2]
local minute_limit, day_limit = limits[1], limits[2]
local answers = {}
local taken, expiry = {}, nil
position, lease_at = 1, 1
for _ = 1, admissions do
  local estimate, leased, cost
  if budgeted then
    estimate, leased, cost, position = unpack_numbers(admission_format, admitting, position)
  else
    estimate, leased, position = unpack_numbers(admission_format, admitting, position)
    cost = -1
  end
  local lease = nil
  if leased == 1 then
    lease = sub(admitted_leases, lease_at, lease_at + lease_bytes - 1)
    lease_at = lease_at + lease_bytes
  end

  local rate_after, rate_wait = nil, 0
  if per_minute > 0 then
    local after = max(rate_tat, now) + interval
    if after - now > window then
      rate_wait = after - now - window
    else
      rate_after = after
    end
  end

  -- Each token window's position after this request (nil: no such window).
  local token_wait = 0
  local minute_after, minute_tokens, day_after, day_tokens = nil, nil, nil, nil
  if minute_limit > 0 then
    minute_tokens = min(estimate, minute_limit)
    minute_after = max(minute.tat, now) + minute_tokens * periods[1] / minute_limit
    token_wait = max(token_wait, minute_after - now - periods[1])
  end
  if day_limit > 0 then
    day_tokens = min(estimate, day_limit)
    day_after = max(whole_day.tat, now) + day_tokens * periods[2] / day_limit
    token_wait = max(token_wait, day_after - now - periods[2])
  end

  -- Every budget window the cost would take over its limit; the one that stays shut
  -- longest is named (the month over the day, the owner's over the key's on a tie).
  local over_account, over_window, over_limit, over_spent = 0, 0, 0, 0
  if budgeted and cost >= 0 then
    for a = 1, account_count do
      local account = accounts[a]
      local spent_day, spent_month = spent(account)
      local limit = account.day_limit
      if limit >= 0 and spent_day + cost > limit and 1 >= over_window then
        over_account, over_window, over_limit, over_spent = a, 1, limit, spent_day
      end
      limit = account.month_limit
      if limit >= 0 and spent_month + cost > limit then
        over_account, over_window, over_limit, over_spent = a, 2, limit, spent_month
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
  elseif over_window > 0 then
    verdict = 4
  end

  if verdict == 0 then
    if rate_after then
      rate_tat, rate_dirty = rate_after, true
    end
    if minute_after then minute.tat, minute.dirty = minute_after, true end
    if day_after then whole_day.tat, whole_day.dirty = day_after, true end
    if max_concurrent > 0 and lease then
      in_flight = in_flight + 1
      expiry = expiry or int(now + lifetime)
      taken[#taken + 1] = expiry
      taken[#taken + 1] = lease
    end
    if cost >= 0 then
      for a = 1, account_count do
        local account = accounts[a]
        local spent_day, spent_month = spent(account)
        account.ds, account.dm = day, spent_day + cost
        account.ms, account.mm = month, spent_month + cost
        account.dirty, account.reserved = true, true
      end
    end
  end

  -- The rate's position after this request if admitted, without it if refused.
  local rate_remaining, rate_reset = -1, 0
  if per_minute > 0 then
    local backlog = min(max(rate_tat - now, 0), window)
    rate_remaining = max(floor((window - backlog) / interval), 0)
    rate_reset = backlog
  end

  -- The window with the fewest tokens left, as the headers show it.
  local shown, token_limit, token_remaining, token_reset = 0, 0, 0, 0
  local reserved_minute, reserved_day = -1, -1
  if minute_tokens then
    reserved_minute = minute_tokens
    local backlog = max(minute.tat - now, 0)
    shown, token_limit, token_reset = 1, minute_limit, backlog
    token_remaining = floor(max(periods[1] - backlog, 0) * minute_limit / periods[1])
  end
  if day_tokens then
    reserved_day = day_tokens
    local backlog = max(whole_day.tat - now, 0)
    local remaining = floor(max(periods[2] - backlog, 0) * day_limit / periods[2])
    if shown == 0 or remaining < token_remaining then
      shown, token_limit, token_remaining, token_reset = 2, day_limit, remaining, backlog
    end
  end
  -- One pack per admission (a second one and a concatenation cost Redis ~2.7k
  -- instructions per request).
  local answer
  if budgeted then
    -- The tightest budget window: what it has left after this request if admitted,
    -- without it if refused.
    local budget_left = -1
    for a = 1, account_count do
      local account = accounts[a]
      local spent_day, spent_month = spent(account)
      if account.day_limit >= 0 then
        local left = max(0, account.day_limit - spent_day)
        if budget_left < 0 or left < budget_left then budget_left = left end
      end
      if account.month_limit >= 0 then
        local left = max(0, account.month_limit - spent_month)
        if budget_left < 0 or left < budget_left then budget_left = left end
      end
    end
    if verdict ~= 4 then over_account, over_window, over_limit, over_spent = 0, 0, 0, 0 end
    answer = pack_numbers('<i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8', verdict, ceil(min(wait, max_debt)),
      rate_remaining, ceil(rate_reset), shown, token_limit, token_remaining,
      ceil(min(token_reset, periods[2] + max_debt)), reserved_minute, reserved_day,
      budget_left, over_account, over_window, over_limit, over_spent)
  else
    answer = pack_numbers('<i8i8i8i8i8i8i8i8i8i8', verdict, ceil(min(wait, max_debt)),
      rate_remaining, ceil(rate_reset), shown, token_limit, token_remaining,
      ceil(min(token_reset, periods[2] + max_debt)), reserved_minute, reserved_day)
  end
  answers[#answers + 1] = answer
end

if rate_dirty then
  redis.call('SET', KEYS[1], int(rate_tat), 'PX', int(ceil((rate_tat - now) / 1000) + 1000))
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
  if w.limit > 0 then longest = max(longest, w.tat - now) end
end
if #fields > 0 then
  redis.call('HSET', KEYS[2], unpack(fields))
  redis.call('PEXPIRE', KEYS[2], int(ceil(longest / 1000) + 1000))
end
if #taken > 0 then
  redis.call('ZADD', KEYS[3], unpack(taken))
  redis.call('PEXPIRE', KEYS[3], int(ceil(lifetime / 1000) + 1000))
end
-- An account is kept until a week after its month ends (from its last reservation), so
-- a late settlement still finds it; a settlement alone keeps the expiry it has.
for a, account in ipairs(accounts) do
  if account.dirty then
    redis.call('HSET', KEYS[3 + a], 'ds', int(account.ds), 'dm', int(account.dm),
      'ms', int(account.ms), 'mm', int(account.mm))
    if account.reserved then redis.call('PEXPIRE', KEYS[3 + a], ARGV[9]) end
  end
end
return table.concat(answers)
