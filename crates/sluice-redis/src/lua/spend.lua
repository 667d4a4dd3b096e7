-- sluice: one call's spend on every window of every budget it touches
-- (issue 14), checked and charged in one atomic step.
--
-- Each budget is one sliding window: at most `limit` units spent by starts
-- in any `window` (µs), the call costing `cost` units there (1 for a
-- request window, the call's estimate for a unit's window). The common
-- start is the earliest instant at which every budget has room: anywhere
-- in a window whose log has room for the cost, else never before the
-- latest start already granted in it (a window ending at the new start
-- is then the only one it can overfill), unless the call fits as asked
-- (at `not_before`) in every window it would share with the later
-- grants: then it starts there, in the room a refund or a true-up left
-- in front of them. A start further off than `max_wait` is denied and
-- charges nothing; a granted one is charged in every budget at once.
--
-- Every key is `{prefix}:{cred}:b:...`: one hash slot per credential.
-- A log member is `{member}|{cost}`: the cost travels with the start, so
-- a true-up (settle.lua) can rewrite it at the start's own time.
--
-- A lease asks for several starts of the same spend at once (`slots`):
-- the first as above, each further one at its own earliest common start
-- after the one before, no sooner than `lead` from now and no later than
-- `horizon` after the call's own start (on a saturated key that start is
-- itself a window away: measured from now, no further start would fit
-- and every call would cost a round trip), as its own member
-- (`{member}+{k}`). Every start of a lease is
-- charged in every budget, so a lease counts in every window and unit
-- exactly as that many calls would. A lease never holds a GCRA budget (a
-- bucket gives a slot back only while nothing was charged after it).
--
-- Blocks and spent quotas hold it as they hold a call on one limit
-- (reserve.lua): a spent quota on any of the call's scopes denies it, and
-- no start comes before the latest block on them; the reply carries every
-- active one, so that the caller's process knows them from then on.
--
-- KEYS: one sorted set per budget (score = start µs), then the
--       credential's heartbeat set (used when ARGV 6 names a process),
--       then this spend's void mark (void.lua: its caller gave up on the
--       answer; it charges nothing), then the credential's blocks hash
--       and its quota hash
-- ARGV: 1 now (µs; '' = the server's TIME), 2 max_wait µs, 3 member,
--       4 TTL slack µs, 5 not_before µs from now (the start may not come
--       earlier: another scope of the call starts it later), 6 process id
--       ('' = no heartbeat), 7 heartbeat window µs, 8 slots (at least 1),
--       9 horizon µs, 10 lead µs, 11 d, then d members of earlier leased
--       starts of this same spend whose time passed unused (removed from
--       every window first: given back in the same step); a member written
--       `!{member}` is instead the start the caller holds and would move
--       earlier (issue 50): left out of every window while this call is
--       placed, and kept, granted or not (its caller gives it back once it
--       has the earlier start, so that a lost reply loses nothing), then per budget:
--       limit, window µs, cost, burst (0: a sliding window; else GCRA:
--       its key is a string holding the theoretical arrival time `tat`,
--       T = ceil(window / limit), tau = (burst - 1) T, a start at t
--       spending c allowed when t >= tat + (c - 1) T - tau), then the
--       call's scope fields (key parts), for its blocks and quotas
-- Reply: {1, wait µs, 0, processes, blocks, quotas, next µs, start µs,
--        n further starts, their starts µs, then per GCRA budget: its
--        index (1-based), tat before, tat after} or {0, wait µs, index,
--        processes, blocks, quotas, 'rate'|'blocked'|'quota'}, where the
--        index (1-based) is, for 'rate', the budget that decided it (the
--        one whose window frees last, or whose latest grant the call must
--        follow), else the scope held; blocks and quotas are {field, µs
--        from now, ...} for every active one, and next is how far from
--        now the same spend's earliest start lies once this one (and its
--        lease) is charged: the caller's process knows no start is free
--        before it (processes: those in the
--        heartbeat set, 0 without a heartbeat; the fallback's share is one
--        over them)

local now = clock(ARGV[1])
local max_wait = tonumber(ARGV[2])
local member = ARGV[3]
local slack = tonumber(ARGV[4])
local not_before = tonumber(ARGV[5]) or 0
local process = ARGV[6]
local heartbeat = tonumber(ARGV[7]) or 0
local slots = tonumber(ARGV[8]) or 1
local horizon = tonumber(ARGV[9]) or 0
local lead = tonumber(ARGV[10]) or 0
local stale = tonumber(ARGV[11]) or 0
local first = 11 + stale
local count = #KEYS - 4

-- Voided by its id before it ran: its caller already settled it.
if redis.call('EXISTS', KEYS[count + 2]) == 1 then return {0, 0, 1, 0, {}, {}, 'rate'} end

local processes = 0
if process ~= '' then
  local procs = KEYS[count + 1]
  redis.call('ZADD', procs, int(now), process)
  redis.call('ZREMRANGEBYSCORE', procs, '-inf', '(' .. int(now - heartbeat))
  processes = redis.call('ZCARD', procs)
  local ms = math.ceil((heartbeat + slack) / 1000)
  if ms < 1 then ms = 1 end
  redis.call('PEXPIRE', procs, int(ms))
end

local block_list, blocks = active(KEYS[count + 3], now)
local quota_list, quotas = active(KEYS[count + 4], now)
-- The call's scopes: the first whose quota is spent, and the latest block.
local blocked, blocked_scope, spent, spent_scope = 0, 0, nil, 0
for i = first + count * 4 + 1, #ARGV do
  local scope, index = ARGV[i], i - first - count * 4
  if quotas[scope] and not spent then spent, spent_scope = quotas[scope], index end
  if (blocks[scope] or 0) > blocked then blocked, blocked_scope = blocks[scope], index end
end

local budgets = {}
for i = 1, count do
  local base = first + (i - 1) * 4
  budgets[i] = {
    key = KEYS[i],
    limit = tonumber(ARGV[base + 1]),
    window = tonumber(ARGV[base + 2]),
    cost = tonumber(ARGV[base + 3]),
    burst = tonumber(ARGV[base + 4]) or 0,
  }
  local b = budgets[i]
  if b.burst > 0 then
    b.interval = math.ceil(b.window / b.limit)
    b.tau = (b.burst - 1) * b.interval
    b.tat = tonumber(redis.call('GET', b.key)) or 0
  end
end

local function cost_of(entry)
  local at = string.find(entry, '|[^|]*$')
  if not at then return 1 end
  return tonumber(string.sub(entry, at + 1)) or 1
end

-- Forget what has left every window, and the stale leased starts; the
-- start the caller moves from is set aside, to put back before replying.
local aside = {}
for _, b in ipairs(budgets) do
  if b.burst == 0 then
    redis.call('ZREMRANGEBYSCORE', b.key, '-inf', '(' .. int(now - b.window + 1))
    for d = 1, stale do
      local gone, own = ARGV[11 + d], false
      if string.sub(gone, 1, 1) == '!' then gone, own = string.sub(gone, 2), true end
      local entry = gone .. '|' .. int(b.cost)
      local score = own and redis.call('ZSCORE', b.key, entry)
      if score then aside[#aside + 1] = {b.key, score, entry} end
      redis.call('ZREM', b.key, entry)
    end
  end
end
local function put_back()
  for _, a in ipairs(aside) do redis.call('ZADD', a[1], a[2], a[3]) end
end

-- A spent quota denies it (the stale starts above are given back all the same).
if spent then
  put_back()
  return {0, spent - now, spent_scope, processes, block_list, quota_list, 'quota'}
end

-- The earliest start at or after `floor` at which every budget has room,
-- and the budget that decided it. A window whose log has room for the
-- cost as well allows any start (no window holds more than its whole
-- log); a fuller one, a start after its latest, once enough of its oldest
-- entries have left the window ending there (as the engine's
-- SlidingWindow::earliest_for).
local function place(floor)
  local common, decided = floor, 0
  for i, b in ipairs(budgets) do
    local earliest = floor
    if b.burst > 0 then
      -- The bucket holds the whole cost at once from this time on.
      if b.cost > 0 then
        local fits = b.tat + (b.cost - 1) * b.interval - b.tau
        if fits > earliest then earliest = fits end
      end
    else
      local live = redis.call('ZRANGE', b.key, 0, -1, 'WITHSCORES')
      local used = 0
      for j = 1, #live, 2 do used = used + cost_of(live[j]) end
      local excess = used + b.cost - b.limit
      if excess > 0 then
        local latest = tonumber(live[#live])
        if latest and latest > earliest then earliest = latest end
        local j = 1
        while excess > 0 and j <= #live do
          excess = excess - cost_of(live[j])
          local freed = tonumber(live[j + 1]) + b.window
          if freed > earliest then earliest = freed end
          j = j + 2
        end
      end
    end
    if earliest > common then
      common = earliest
      decided = i
    end
  end
  return common, decided
end

-- Whether a start at `t` costing each budget its cost fits every window
-- it would share with starts already granted, those after it included:
-- for each window ending at `t` or at a start in [t, t + window), the
-- starts in it plus the cost stay within the limit. Room that a refund or
-- a true-up below the estimate left in front of later grants is so used,
-- and no granted start moves. (A GCRA bucket keeps no such room.)
local function fits_at(t)
  for _, b in ipairs(budgets) do
    if b.burst > 0 then return false end
    local live = redis.call('ZRANGEBYSCORE', b.key, '(' .. int(t - b.window), '(' .. int(t + b.window), 'WITHSCORES')
    local times, costs = {}, {}
    for j = 1, #live, 2 do
      times[#times + 1] = tonumber(live[j + 1])
      costs[#costs + 1] = cost_of(live[j])
    end
    -- Window ends: `t`, then every start in [t, t + window).
    local left, sum, right = 1, 0, 0
    local function over(s)
      while right < #times and times[right + 1] <= s do
        right = right + 1
        sum = sum + costs[right]
      end
      while left <= right and times[left] <= s - b.window do
        sum = sum - costs[left]
        left = left + 1
      end
      return sum + b.cost > b.limit
    end
    if over(t) then return false end
    for j = 1, #times do
      if times[j] >= t and over(times[j]) then return false end
    end
  end
  return true
end

-- Charges one start at `common` as `name` in every budget.
local function charge(common, name)
  for _, b in ipairs(budgets) do
    if b.burst > 0 then
      if b.cost > 0 then
        b.after = math.max(b.tat, common) + b.cost * b.interval
      else
        b.after = b.tat
      end
      redis.call('SET', b.key, int(b.after), 'PX', ttl_ms(b.after - now + slack))
    else
      redis.call('ZADD', b.key, int(common), name .. '|' .. int(b.cost))
      extend(b.key, common - now + b.window + slack)
    end
  end
end

local floor = math.max(now + not_before, blocked)
local common, decided = place(floor)
-- Later grants put it off: it may still fit as asked, in front of them.
if common > floor and fits_at(floor) then common = floor end
local wait = common - now
if wait > max_wait then
  put_back()
  if blocked >= common then
    return {0, wait, blocked_scope, processes, block_list, quota_list, 'blocked'}
  end
  if decided == 0 then decided = 1 end
  return {0, wait, decided, processes, block_list, quota_list, 'rate'}
end
charge(common, member)

local further = {}
for _, b in ipairs(budgets) do
  if b.burst > 0 then slots = 1 end
end
floor = math.max(now + math.max(not_before, lead), blocked)
for k = 2, slots do
  local at = place(floor)
  if at - common > horizon then break end
  charge(at, member .. '+' .. int(k))
  further[#further + 1] = at
end

local next_start = place(math.max(now, blocked)) - now
put_back()
local reply = {1, wait, 0, processes, block_list, quota_list, next_start, common, #further}
for _, at in ipairs(further) do reply[#reply + 1] = at end
for i, b in ipairs(budgets) do
  if b.burst > 0 then
    reply[#reply + 1] = i
    reply[#reply + 1] = b.tat
    reply[#reply + 1] = b.after
  end
end
return reply
