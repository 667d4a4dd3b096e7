-- sluice: a scope is held for every process: blocked by the server (no
-- start before `until`, then the limit restarts empty) or its quota spent.
--
-- Mirrors LimiterCell::penalize (void waiting reservations: bump the
-- generation and drop future window entries; restart empty) and the
-- quota of InMemoryBudget::block, then publishes the hold.
--
-- KEYS: 1 blocks hash, 2 quota hash, 3 meta hash, 4 window zset, 5 gcra string
-- ARGV: 1 now (µs; '' = TIME), 2 scope field, 3 wait (µs), 4 'blocked'|'quota',
--       5 TTL slack µs, 6 channel ('' = none), 7 credential part
-- Reply: the hold's end, µs from now (0 when nothing changed).

local now = clock(ARGV[1])
local scope = ARGV[2]
local until_ = now + tonumber(ARGV[3])
local kind = ARGV[4]
local slack = tonumber(ARGV[5])

local key = KEYS[1]
if kind == 'quota' then key = KEYS[2] end
local current = tonumber(redis.call('HGET', key, scope)) or 0

if kind == 'quota' then
  if until_ > current then
    redis.call('HSET', key, scope, int(until_))
    current = until_
  end
else
  if until_ <= now then return 0 end
  redis.call('HINCRBY', KEYS[3], 'g:' .. scope, 1)
  local params = redis.call('HGET', KEYS[3], 'p:' .. scope)
  if params then
    local alg, a, b = string.match(params, '^(%a):(%d+):(%d+)$')
    a = tonumber(a)
    b = tonumber(b)
    if alg == 'w' then
      -- Treat the window ending at `until` as full: top it up to N starts
      -- with virtual ones one interval apart at its end (real starts in it
      -- count towards the N), so the next starts come one interval apart.
      redis.call('ZREMRANGEBYSCORE', KEYS[4], '(' .. int(now), '+inf')
      local interval = math.floor(b / a)
      local from = until_ - b
      if from < 0 then from = 0 end
      local logged = redis.call('ZCOUNT', KEYS[4], '(' .. int(from), int(until_))
      local gen = redis.call('HGET', KEYS[3], 'g:' .. scope)
      local args = {}
      for k = logged, a - 1 do
        args[#args + 1] = int(from + k * interval)
        args[#args + 1] = 'r' .. gen .. ':' .. k
        if #args >= 400 then
          redis.call('ZADD', KEYS[4], unpack(args))
          args = {}
        end
      end
      if #args > 0 then redis.call('ZADD', KEYS[4], unpack(args)) end
      extend(KEYS[4], until_ + b - now + slack)
      extend(KEYS[3], until_ + b - now + 2 * slack)
    elseif alg == 'g' then
      local tat = tonumber(redis.call('GET', KEYS[5])) or 0
      if until_ + b > tat then tat = until_ + b end
      redis.call('SET', KEYS[5], int(tat), 'PX', int(math.ceil((tat - now + slack) / 1000)))
      extend(KEYS[3], tat - now + 2 * slack)
    end
  end
  if until_ > current then
    redis.call('HSET', key, scope, int(until_))
    current = until_
  end
end
if current <= now then return 0 end
extend(key, current - now + slack)
-- Drop holds that ended, so the hash does not grow with old scopes.
local flat = redis.call('HGETALL', key)
for i = 1, #flat, 2 do
  if (tonumber(flat[i + 1]) or 0) <= now then redis.call('HDEL', key, flat[i]) end
end
if ARGV[6] ~= '' then
  redis.call('PUBLISH', ARGV[6], kind .. '|' .. int(current - now) .. '|' .. ARGV[7] .. '|' .. scope)
end
return current - now
