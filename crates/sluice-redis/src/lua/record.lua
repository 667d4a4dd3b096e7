-- sluice: add starts a process made without asking Redis (its fallback
-- decided them while a command failed or the breaker was open) to every
-- log or bucket they charged, so that every other process counts them:
-- the first scope's window (or bucket) of a call on one limit, or every
-- budget of a call on several windows, groups or units (the spend
-- script's). The one script for both: a call on one limit is the
-- one-window case.
--
-- The starts happened: nothing is refused. An exact window logs each
-- start still inside the window at its time, as `{member}|{cost}` (the
-- spend script's entry; the reserve script counts entries); a GCRA
-- budget moves its arrival time on by the cost's intervals per start, in
-- order of time (a start behind the arrival time pushes it on all the
-- same: the bucket errs on spending less).
--
-- KEYS: one per budget: its window's sorted set, or its bucket's string
-- ARGV: 1 now (µs; '' = the server's TIME), 2 TTL slack µs, 3 budgets,
--       then per budget: limit, window µs, cost, burst (0: a sliding
--       window; else GCRA), then the starts, earliest first, each as two
--       arguments: signed µs from now, and its member (unique to the
--       start: sent again after a timeout, a start is logged once)
-- Reply: how many starts still counted in some budget.

local now = clock(ARGV[1])
local slack = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local first = 3 + count * 4

local counted = {}
for i = 1, count do
  local base = 3 + (i - 1) * 4
  local key = KEYS[i]
  local limit = tonumber(ARGV[base + 1])
  local window = tonumber(ARGV[base + 2])
  local cost = tonumber(ARGV[base + 3])
  local burst = tonumber(ARGV[base + 4]) or 0
  if burst == 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. int(now - window + 1))
    local args, last = {}, nil
    for j = first + 1, #ARGV - 1, 2 do
      local at = now + tonumber(ARGV[j])
      -- A start a window old no longer counts in this one.
      if at > now - window then
        args[#args + 1] = int(at)
        args[#args + 1] = ARGV[j + 1] .. '|' .. int(cost)
        counted[j] = true
        if not last or at > last then last = at end
      end
    end
    if last then
      redis.call('ZADD', key, unpack(args))
      extend(key, last - now + window + slack)
    end
  elseif cost > 0 then
    local interval = math.ceil(window / limit)
    local tat = tonumber(redis.call('GET', key)) or 0
    local moved = false
    for j = first + 1, #ARGV - 1, 2 do
      local at = now + tonumber(ARGV[j])
      local drained = at + cost * interval <= now
      -- A start behind the arrival time pushes it on; one whose cost has
      -- drained from an idle bucket by now counts nowhere.
      if at < tat or not drained then
        if at > tat then tat = at end
        tat = tat + cost * interval
        if not drained then counted[j] = true end
        moved = true
      end
    end
    if moved then
      redis.call('SET', key, int(tat), 'PX', ttl_ms(tat - now + slack))
    end
  end
end

local recorded = 0
for _ in pairs(counted) do recorded = recorded + 1 end
return recorded
