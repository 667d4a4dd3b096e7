-- sluice: reserve up to `slots` start slots for one call (or one lease).
--
-- Mirrors sluice::shared::InMemoryBudget::decide: every scope's quota
-- first, then one common start after every scope's block and the first
-- scope's limit (an exact sliding window, or GCRA). A denial charges
-- nothing. Extra slots (a lease) follow the first one, each at the
-- earliest start the limit allows, while within `horizon` of now. Beyond
-- the first `immediate` slots (for the callers present): while an exact
-- window has room for them, the k-th extra slot no sooner than k times
-- `pace` after now (when this process expects its next callers: never
-- before, so that a caller on time starts at its slot's time), or at once
-- when that is less than `tick` away (a caller's timer wakes no sooner
-- than its next tick: a slot a moment ahead would only make it later);
-- once the limit binds, only slots at least `lead` after now (a slot due
-- sooner serves only the callers present). An exact window places a
-- start anywhere while its log has room for it, so slots placed ahead
-- hold no one back.
--
-- KEYS: 1 blocks hash, 2 quota hash, 3 meta hash, 4 window zset (first
--       scope), 5 gcra string (first scope), 6 heartbeat zset, 7 this
--       reservation's void mark (void.lua: its caller gave up on the
--       answer; it charges nothing)
-- ARGV: 1 now (µs; '' = the server's TIME), 2 not_before (µs from now),
--       3 max_wait, 4 slots, 5 horizon, 6 algorithm ('n' none, 'w' window,
--       'g' gcra), 7 and 8 its parameters (w: N, W µs; g: T µs, tau µs),
--       9 member prefix (unique per call), 10 process id ('' = none),
--       11 heartbeat window µs, 12 TTL slack µs, 13 immediate, 14 lead µs,
--       15 pace µs, 16 tick µs, 17.. scope fields
-- Reply: {1, processes, blocks, quotas, generation, {wait, undo, ...}, next, now}
--     or {0, processes, blocks, quotas, wait, scope index, 'quota'|'blocked'|'rate', now}
-- where blocks and quotas are {field, µs from now, ...} for every active
-- one, and next is how far from now the first scope's limit (blocks
-- aside) has its next start after the slots granted (-1: no limit): the
-- caller's process knows no start is free before it, and now is the
-- script's time (µs): the caller places the waits on its own clock by it
-- (clock.rs), not by when the answer came.

-- Voided by its id before it ran: its caller already settled it.
if redis.call('EXISTS', KEYS[7]) == 1 then return {0, 0, {}, {}, 0, 1, 'rate'} end

local now = clock(ARGV[1])
local not_before = now + tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local horizon = tonumber(ARGV[5])
local alg = ARGV[6]
local p1 = tonumber(ARGV[7])
local p2 = tonumber(ARGV[8])
local slack = tonumber(ARGV[12])
local immediate = tonumber(ARGV[13])
local lead = tonumber(ARGV[14])
local pace = tonumber(ARGV[15])
local tick = tonumber(ARGV[16])
local scopes = {}
for i = 17, #ARGV do scopes[#scopes + 1] = ARGV[i] end
local first = scopes[1]

local processes = 0
if ARGV[10] ~= '' then
  local window = tonumber(ARGV[11])
  redis.call('ZADD', KEYS[6], int(now), ARGV[10])
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', '(' .. int(now - window))
  processes = redis.call('ZCARD', KEYS[6])
  redis.call('PEXPIRE', KEYS[6], ttl_ms(window + slack))
end

-- Every active block and quota of the credential, for the caller's view.
local block_list, blocks = active(KEYS[1], now)
local quota_list, quotas = active(KEYS[2], now)

for i, scope in ipairs(scopes) do
  local q = quotas[scope]
  if q then return {0, processes, block_list, quota_list, q - now, i, 'quota', now} end
end

-- Remember the first scope's limit, so that a block can restart it empty.
local meta_field = 'p:' .. first
local params = alg .. ':' .. ARGV[7] .. ':' .. ARGV[8]
if alg == 'n' then
  redis.call('HDEL', KEYS[3], meta_field)
elseif redis.call('HGET', KEYS[3], meta_field) ~= params then
  redis.call('HSET', KEYS[3], meta_field, params)
end

-- The first scope's algorithm. Window: prune what can no longer matter,
-- then read the latest start and the ones that bind the next `want` starts.
local count, last, ranked, tat = 0, nil, {}, 0
if alg == 'w' then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', int(now - p2))
  count = redis.call('ZCARD', KEYS[4])
  if count > 0 then
    local top = redis.call('ZREVRANGE', KEYS[4], 0, 0, 'WITHSCORES')
    last = tonumber(top[2])
    -- One rank more than the slots need: the next start after them.
    local lo = p1 - want - 1
    if lo < 0 then lo = 0 end
    local rows = redis.call('ZREVRANGE', KEYS[4], lo, p1 - 1, 'WITHSCORES')
    for i = 2, #rows, 2 do ranked[lo + i / 2] = tonumber(rows[i]) end
  end
elseif alg == 'g' then
  tat = tonumber(redis.call('GET', KEYS[5])) or 0
end

local placed = {}
-- The earliest start at or after `floor` for the next slot, with
-- #placed slots already placed in this call (in order of time).
local function earliest(floor)
  local at = floor
  if alg == 'w' then
    local j = #placed
    -- While the log and this call's slots leave room for one more, a
    -- start anywhere keeps the promise: no window holds more than them all.
    if count + j >= p1 then
      local latest = last
      if j > 0 and (not latest or placed[j] > latest) then latest = placed[j] end
      if latest and latest > at then at = latest end
      -- The N-th latest start once this one is in, of the log and the
      -- slots placed (which may lie in front of logged ones): the
      -- min(j + 1, N)-th latest of the log's ranks N - j .. N and the
      -- slots placed, as the N - j - 1 latest logged starts outrank them.
      local near = {}
      local from = p1 - j
      if from < 1 then from = 1 end
      for r = from, p1 do
        if ranked[r] then near[#near + 1] = ranked[r] end
      end
      for i = 1, j do near[#near + 1] = placed[i] end
      table.sort(near, function(a, b) return a > b end)
      local rank = j + 1
      if rank > p1 then rank = p1 end
      local nth = near[rank]
      if nth and nth + p2 > at then at = nth + p2 end
    end
  elseif alg == 'g' then
    if tat - p2 > at then at = tat - p2 end
  end
  return at
end

local start = not_before
for i, scope in ipairs(scopes) do
  local penalty = blocks[scope] or 0
  local floor = now
  if penalty > floor then floor = penalty end
  local e
  if i == 1 then e = earliest(floor) else e = floor end
  if e < start then e = start end
  if e - now > max_wait then
    local hold = 'rate'
    if penalty > now and penalty >= e then hold = 'blocked' end
    return {0, processes, block_list, quota_list, e - now, i, hold, now}
  end
  start = e
end

-- Charge the first slot at `start`, and the lease's extra slots after it.
local fixed = not_before
for _, scope in ipairs(scopes) do
  local penalty = blocks[scope] or 0
  if penalty > fixed then fixed = penalty end
end
if alg == 'n' then want = 1 end
local undo = {}
local at = start
local prefix = ARGV[9]
while true do
  local n = #placed + 1
  if alg == 'g' then
    local before = tat
    if at > tat then tat = at end
    tat = tat + p1
    undo[n] = int(before) .. ':' .. int(tat)
  elseif alg == 'w' then
    undo[n] = prefix .. ':' .. n
  else
    undo[n] = ''
  end
  placed[n] = at
  if n >= want then break end
  -- Beyond the slots due at once: the k-th comes about when the callers
  -- to come are expected while the window has room, else at least `lead`
  -- ahead.
  local extra = n >= immediate
  local roomy = alg == 'w' and count + n < p1
  local floor_n = fixed
  if extra and roomy then
    local ahead = (n - immediate + 1) * pace
    if ahead >= tick and now + ahead > floor_n then floor_n = now + ahead end
  end
  at = earliest(floor_n)
  if at - now > horizon then break end
  if extra and not roomy and at - now < lead then break end
end

local state_ttl = 0
if alg == 'w' then
  local args = {}
  for i, t in ipairs(placed) do
    args[#args + 1] = int(t)
    args[#args + 1] = undo[i]
  end
  redis.call('ZADD', KEYS[4], unpack(args))
  state_ttl = placed[#placed] + p2 - now + slack
  redis.call('PEXPIRE', KEYS[4], ttl_ms(state_ttl))
elseif alg == 'g' then
  state_ttl = tat - now
  if state_ttl < 0 then state_ttl = 0 end
  state_ttl = state_ttl + slack
  redis.call('SET', KEYS[5], int(tat), 'PX', ttl_ms(state_ttl))
end
-- The generation must outlive the state it guards.
if alg ~= 'n' then extend(KEYS[3], state_ttl + slack) end

local generation = tonumber(redis.call('HGET', KEYS[3], 'g:' .. first)) or 0
local slots = {}
for i, t in ipairs(placed) do
  slots[#slots + 1] = t - now
  slots[#slots + 1] = undo[i]
end
local next = -1
if alg ~= 'n' then next = earliest(now) - now end
return {1, processes, block_list, quota_list, generation, slots, next, now}
