-- sluice: add starts a process made without asking Redis (its fallback
-- decided them while a command failed or the breaker was open) to the
-- first scope's shared state, so that every other process counts them.
--
-- The starts happened: nothing is refused. An exact window logs each one
-- still inside the window; a GCRA moves its arrival time on by one
-- interval per start, in order of time (a start behind the arrival time
-- pushes it on all the same: the bucket errs on spending less).
--
-- KEYS: 1 meta hash, 2 window zset, 3 gcra string
-- ARGV: 1 now (µs; '' = the server's TIME), 2 algorithm ('w' window,
--       'g' gcra), 3 and 4 its parameters (w: N, W µs; g: T µs, tau µs),
--       5 TTL slack µs, 6.. the starts, earliest first, each as two
--       arguments: signed µs from now, and its window entry's member
--       (unique to the start: sent again after a timeout, a start is
--       logged once)
-- Reply: how many starts were recorded.

local now = clock(ARGV[1])
local alg = ARGV[2]
local p1 = tonumber(ARGV[3])
local p2 = tonumber(ARGV[4])
local slack = tonumber(ARGV[5])

local recorded = 0
local state_ttl = 0
if alg == 'w' then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', int(now - p2))
  local args, last = {}, nil
  for i = 6, #ARGV - 1, 2 do
    local at = now + tonumber(ARGV[i])
    -- A start a window old no longer counts anywhere.
    if at > now - p2 then
      args[#args + 1] = int(at)
      args[#args + 1] = ARGV[i + 1]
      recorded = recorded + 1
      if not last or at > last then last = at end
    end
  end
  if recorded == 0 then return 0 end
  redis.call('ZADD', KEYS[2], unpack(args))
  state_ttl = last + p2 - now + slack
  extend(KEYS[2], state_ttl)
elseif alg == 'g' then
  local tat = tonumber(redis.call('GET', KEYS[3])) or 0
  for i = 6, #ARGV - 1, 2 do
    local at = now + tonumber(ARGV[i])
    if at > tat then tat = at end
    tat = tat + p1
    recorded = recorded + 1
  end
  if recorded == 0 then return 0 end
  state_ttl = tat - now
  if state_ttl < 0 then state_ttl = 0 end
  state_ttl = state_ttl + slack
  redis.call('SET', KEYS[3], int(tat), 'PX', int(math.ceil(state_ttl / 1000)))
else
  return 0
end
-- The generation must outlive the state it guards.
extend(KEYS[1], state_ttl + slack)
return recorded
