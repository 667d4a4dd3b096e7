-- sluice: add spends a process made without asking Redis (its fallback
-- decided them while a command failed or the breaker was open) to every
-- budget they charged: the windows of a call on several windows, groups
-- or units (the spend script's budgets), so that every other process
-- counts them.
--
-- The spends happened: nothing is refused. An exact window logs each
-- spend still inside the window, as the spend script logs a grant
-- (`{member}|{cost}` at its start); a GCRA budget moves its arrival time
-- on by the cost's intervals per spend, in order of time (a spend behind
-- the arrival time pushes it on all the same: the bucket errs on
-- spending less).
--
-- KEYS: one per budget, as the spend script's
-- ARGV: 1 now (µs; '' = the server's TIME), 2 TTL slack µs, 3 budgets,
--       then per budget: limit, window µs, cost, burst (0: a sliding
--       window; else GCRA), then the spends, earliest first, each as two
--       arguments: signed µs from now, and its member (unique to the
--       spend: sent again after a timeout, a spend is logged once)
-- Reply: how many spends still counted in some budget.

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
      -- A spend a window old no longer counts in this one.
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
      -- A spend whose cost has drained from the bucket by now moves nothing.
      if at + cost * interval > now then
        if at > tat then tat = at end
        tat = tat + cost * interval
        counted[j] = true
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
