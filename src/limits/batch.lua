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
-- the settlements of the call, together: four numbers, the tokens they give back and the
-- tokens they take beyond their reservations, per minute and per day (each the sum over
-- the call's settlements that reported usage, for the windows they reserved in; all four
-- absent when the call settles nothing), and, for a key with budget accounts, four more
-- per day and month they were reserved in: the money reserved, the money it cost, and
-- that day's and month's starts; the lease ids they give back; the lease ids to keep
-- (each held again for one lifetime, re-created if the store lost it); the admissions,
-- two numbers each: estimate, whether it takes a lease (1 or 0), and, for a key with
-- budget accounts, a third: its cost (micro-dollars; -1: nothing to reserve); and the
-- lease ids they take, in their order.
-- Returns one string: per admission, five numbers packed as doubles (8 bytes,
-- little-endian): {verdict, wait_us, rate backlog, minute backlog, day backlog}, a
-- backlog being a window's arrival time after the admission (without it if refused)
-- minus the clock, and, for a key with budget accounts, two more per account: what its
-- day and its month have spent after the admission. The gateway works the headers'
-- numbers out of these with the limits it sent, as the same arithmetic in doubles.
-- Verdict 0 admitted, 1 request rate, 2 concurrency, 3 tokens, 4 budget.
-- Every number handed to Redis is formatted as an integer (its floor, by '%d': Lua's
-- '%.0f' cost several times more), and no arrival time runs more than its period plus
-- seven days ahead of the clock, so no value overflows whatever a settlement carries.
-- Amounts of money arrive below 2^50 micro-dollars (the gateway caps them, sums
-- included), so sums of them stay exact in Lua's doubles.
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
  -- The month the account held when read: an account already in the current month has
  -- its expiry (which only moves with the month) set.
  accounts[a].stored_month = accounts[a].ms
  at = at + 2
end
local account_count = #accounts
local budgeted = account_count > 0

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

-- Settlements, all of the call's together: first what they give back, then what they
-- take beyond their reservations (into debt if need be), under the window's limit. (One
-- by one in another order, a window that drains to empty in between would charge less
-- than this; a call's settlements come from requests that ran side by side.)
local settled, settled_leases = ARGV[at], ARGV[at + 1]
at = at + 2
local settled_bytes = #settled
if settled_bytes > 0 then
  if settled_bytes % 32 ~= 0 or (not budgeted and settled_bytes ~= 32) then
    error('sluice: a packed argument has a partial record')
  end
  local tokens = {}
  local position
  tokens[1], tokens[2], tokens[3], tokens[4], position = unpack_numbers('<i8i8i8i8', settled)
  for i = 1, 2 do
    local w, back, beyond = windows[i], tokens[2 * i - 1], tokens[2 * i]
    if w.limit > 0 and (back > 0 or beyond > 0) then
      w.tat = w.tat - back * periods[i] / w.limit
      if beyond > 0 then
        w.tat = min(max(w.tat, now) + beyond * periods[i] / w.limit, now + periods[i] + max_debt)
      end
      w.dirty = true
    end
  end
  -- Money: the reservations replaced by the costs, only in the windows they were made in (a
  -- window that has ended since, or an account the store lost, is left as it is).
  while position <= settled_bytes do
    local money, cost, money_day, money_month
    money, cost, money_day, money_month, position = unpack_numbers('<i8i8i8i8', settled, position)
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
end
local returning = count(settled_leases, lease_bytes)
if returning > 0 then
  local returned = {}
  for i = 1, returning do
    returned[i] = sub(settled_leases, (i - 1) * lease_bytes + 1, i * lease_bytes)
  end
  redis.call('ZREM', KEYS[3], unpack(returned))
end
-- What each account has spent in the current day and month.
for a = 1, account_count do
  local account = accounts[a]
  account.cd, account.cm = 0, 0
  if account.ds == day then account.cd = account.dm end
  if account.ms == month then account.cm = account.mm end
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
  -- Expired leases (of a replica that died) are removed when they could count: when the
  -- set could reach the limit, and past 128 members (where Redis leaves its compact
  -- encoding); otherwise they cost nothing but their place, and expire with the set.
  in_flight = redis.call('ZCARD', KEYS[3])
  if in_flight + admissions > max_concurrent or in_flight > 128 then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', int(now))
    in_flight = redis.call('ZCARD', KEYS[3])
  end
end

local minute, whole_day = windows[1], windows[2]
local minute_limit, day_limit = limits[1], limits[2]
local minute_period, day_period = periods[1], periods[2]
-- The answer's format: five doubles, and two per budget account.
local answer_format = '<ddddd' .. string.rep('dd', account_count)
local first, second = accounts[1], accounts[2]
local answers = {}
local taken, expiry = {}, nil
local position, lease_at = 1, 1
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
  local minute_after, day_after = nil, nil
  if minute_limit > 0 then
    minute_after = max(minute.tat, now) + min(estimate, minute_limit) * minute_period / minute_limit
    token_wait = max(token_wait, minute_after - now - minute_period)
  end
  if day_limit > 0 then
    day_after = max(whole_day.tat, now) + min(estimate, day_limit) * day_period / day_limit
    token_wait = max(token_wait, day_after - now - day_period)
  end

  local verdict, wait = 0, 0
  if rate_wait > 0 then
    verdict, wait = 1, rate_wait
  elseif max_concurrent > 0 and in_flight >= max_concurrent then
    verdict = 2
  elseif token_wait > 0 then
    verdict, wait = 3, token_wait
  elseif budgeted and cost >= 0 then
    -- Refused if the cost takes any budget window over its limit (the gateway names the
    -- one that stays shut longest).
    for a = 1, account_count do
      local account = accounts[a]
      local limit = account.day_limit
      if limit >= 0 and account.cd + cost > limit then verdict = 4 end
      limit = account.month_limit
      if limit >= 0 and account.cm + cost > limit then verdict = 4 end
    end
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
        account.cd, account.cm = account.cd + cost, account.cm + cost
        account.ds, account.dm, account.ms, account.mm = day, account.cd, month, account.cm
        account.dirty, account.reserved = true, true
      end
    end
  end

  -- The windows' positions after this request if admitted, without it if refused, and
  -- what the budgets have spent: one pack per admission.
  wait = ceil(min(wait, max_debt))
  local answer
  if account_count == 0 then
    answer = pack_numbers(answer_format, verdict, wait, rate_tat - now, minute.tat - now,
      whole_day.tat - now)
  elseif account_count == 1 then
    answer = pack_numbers(answer_format, verdict, wait, rate_tat - now, minute.tat - now,
      whole_day.tat - now, first.cd, first.cm)
  else
    answer = pack_numbers(answer_format, verdict, wait, rate_tat - now, minute.tat - now,
      whole_day.tat - now, first.cd, first.cm, second.cd, second.cm)
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
    -- The call's limit, as the gateway wrote it, when the window has it (no format).
    if w.limit == limits[i] then fields[#fields + 1] = ARGV[2 + i]
    else fields[#fields + 1] = int(w.limit) end
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
-- An account is kept until a week after its month ends, so a late settlement still finds
-- it: set by the first reservation of a month (of the account as read: every reservation
-- of that month would set the same time); a settlement alone keeps the expiry it has.
for a, account in ipairs(accounts) do
  if account.dirty then
    -- The current day's and month's starts as the gateway wrote them (no format).
    local ds, ms = ARGV[7], ARGV[8]
    if account.ds ~= day then ds = int(account.ds) end
    if account.ms ~= month then ms = int(account.ms) end
    redis.call('HSET', KEYS[3 + a], 'ds', ds, 'dm', int(account.dm), 'ms', ms,
      'mm', int(account.mm))
    if account.reserved and account.stored_month ~= month then
      redis.call('PEXPIRE', KEYS[3 + a], ARGV[9])
    end
  end
end
return table.concat(answers)
