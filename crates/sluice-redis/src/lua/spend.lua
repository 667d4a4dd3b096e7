-- sluice: one call's spend on every window of every budget it touches
-- (issue 14), checked and charged in one atomic step.
--
-- Each budget is one sliding window: at most `limit` units spent by starts
-- in any `window` (µs), the call costing `cost` units there (1 for a
-- request window, the call's estimate for a unit's window). The common
-- start is the earliest instant at which every budget has room, never
-- before the latest start already granted in any of them (starts are
-- granted in order, so a window ending at the new start is the only one
-- it can overfill). A start further off than `max_wait` is denied and
-- charges nothing; a granted one is charged in every budget at once.
--
-- Every key is `{prefix}:{cred}:b:...`: one hash slot per credential.
-- A log member is `{member}|{cost}`: the cost travels with the start, so
-- a true-up (settle.lua) can rewrite it at the start's own time.
--
-- KEYS: one sorted set per budget (score = start µs), then the
--       credential's heartbeat set (when ARGV 6 names a process)
-- ARGV: 1 now (µs; '' = the server's TIME), 2 max_wait µs, 3 member,
--       4 TTL slack µs, 5 not_before µs from now (the start may not come
--       earlier: another scope of the call starts it later), 6 process id
--       ('' = no heartbeat), 7 heartbeat window µs, then per budget:
--       limit, window µs, cost, burst (0: a sliding window; else GCRA:
--       its key is a string holding the theoretical arrival time `tat`,
--       T = ceil(window / limit), tau = (burst - 1) T, a start at t
--       spending c allowed when t >= tat + (c - 1) T - tau)
-- Reply: {1, wait µs, 0, processes, start µs, then per GCRA budget: its
--        index (1-based), tat before, tat after} or {0, wait µs, index of
--        the budget that decided it (1-based): the one whose window frees
--        last, or whose latest grant the call must follow, processes}
--        (processes: those in the heartbeat set, 0 without a heartbeat;
--        the fallback's share is one over them)

local function int(x) return string.format('%d', x) end

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local max_wait = tonumber(ARGV[2])
local member = ARGV[3]
local slack = tonumber(ARGV[4])
local not_before = tonumber(ARGV[5]) or 0
local process = ARGV[6]
local heartbeat = tonumber(ARGV[7]) or 0
local count = math.floor((#ARGV - 7) / 4)

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

local budgets = {}
for i = 1, count do
  local base = 7 + (i - 1) * 4
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

-- Forget what has left every window, and find the latest granted start.
local start = now + not_before
local latest = 0
for i, b in ipairs(budgets) do
  if b.burst == 0 then
    redis.call('ZREMRANGEBYSCORE', b.key, '-inf', '(' .. int(now - b.window + 1))
    local last = redis.call('ZRANGE', b.key, -1, -1, 'WITHSCORES')
    if last[2] and tonumber(last[2]) > start then
      start = tonumber(last[2])
      latest = i
    end
  end
end

-- Each budget's earliest start at or after `start`: once the oldest
-- entries have left its window, the rest plus the cost fit the limit.
-- Later is never worse (no entry lies after `start`), so the latest of
-- these suits them all.
local decided = latest
local common = start
for i, b in ipairs(budgets) do
  local earliest = start
  if b.burst > 0 then
    -- The bucket holds the whole cost at once from this time on.
    if b.cost > 0 then
      local fits = b.tat + (b.cost - 1) * b.interval - b.tau
      if fits > earliest then earliest = fits end
    end
  else
    local live = redis.call('ZRANGEBYSCORE', b.key, '(' .. int(start - b.window), '+inf', 'WITHSCORES')
    local used = 0
    for j = 1, #live, 2 do used = used + cost_of(live[j]) end
    local excess = used + b.cost - b.limit
    local j = 1
    while excess > 0 and j <= #live do
      excess = excess - cost_of(live[j])
      earliest = tonumber(live[j + 1]) + b.window
      j = j + 2
    end
  end
  if earliest > common then
    common = earliest
    decided = i
  end
end

local wait = common - now
if wait > max_wait then
  if decided == 0 then decided = 1 end
  return {0, wait, decided, processes}
end
local reply = {1, wait, 0, processes, common}
for i, b in ipairs(budgets) do
  if b.burst > 0 then
    local after = b.tat
    if b.cost > 0 then
      after = math.max(b.tat, common) + b.cost * b.interval
    end
    local ms = math.ceil((after - now + slack) / 1000)
    if ms < 1 then ms = 1 end
    redis.call('SET', b.key, int(after), 'PX', int(ms))
    reply[#reply + 1] = i
    reply[#reply + 1] = b.tat
    reply[#reply + 1] = after
  else
    redis.call('ZADD', b.key, int(common), member .. '|' .. int(b.cost))
    local ms = math.ceil((common - now + b.window + slack) / 1000)
    if ms < 1 then ms = 1 end
    local current = redis.call('PTTL', b.key)
    if current < ms then redis.call('PEXPIRE', b.key, int(ms)) end
  end
end
return reply
