-- sluice: a call's spend trued up, or given back (issue 14).
--
-- For each sliding-window budget key, the call's entry `{member}|{old}` is
-- replaced by `{member}|{new}` at the same score, its start: the
-- difference is refunded or charged at the call's start time, so later
-- calls see the real spend. A new cost of '' removes the entry (a slot
-- that was not used). An entry that has already left its window is not
-- found and nothing changes.
--
-- A GCRA budget (a string key holding `tat`) is adjusted as the engine's
-- bucket is: a true-up moves `tat` by the difference × T (a refund never
-- before the call's start); giving a slot back restores the `tat` before
-- it only while nothing was charged after it (`tat` is still the one it
-- left), else the slot is forgone (under-spending).
--
-- KEYS: one key per budget
-- ARGV: 1 member, then per budget: old cost, new cost ('' = remove),
--       and for GCRA T µs, start µs, tat before, tat after ('' for a
--       sliding window)
-- Reply: how many entries were changed

local member = ARGV[1]
local changed = 0
for i = 1, #KEYS do
  local base = 1 + (i - 1) * 6
  local old_cost, new_cost = ARGV[base + 1], ARGV[base + 2]
  local interval = tonumber(ARGV[base + 3])
  if interval then
    local at = tonumber(ARGV[base + 4])
    local before, after = tonumber(ARGV[base + 5]), tonumber(ARGV[base + 6])
    local tat = tonumber(redis.call('GET', KEYS[i]))
    if tat then
      local moved = nil
      if new_cost == '' then
        if tat == after then moved = before end
      else
        local delta = tonumber(new_cost) - tonumber(old_cost)
        local shift = math.abs(delta) * interval
        if delta >= 0 then
          moved = math.max(tat, at) + shift
        else
          moved = math.max(tat - shift, at)
        end
      end
      if moved and moved ~= tat then
        local pttl = redis.call('PTTL', KEYS[i])
        local grow = math.ceil((moved - tat) / 1000)
        if grow < 0 then grow = 0 end
        local ms = pttl + grow
        if ms < 1 then ms = 1 end
        redis.call('SET', KEYS[i], int(moved), 'PX', int(ms))
        changed = changed + 1
      end
    end
  else
    local old = member .. '|' .. old_cost
    local score = redis.call('ZSCORE', KEYS[i], old)
    if score then
      redis.call('ZREM', KEYS[i], old)
      if new_cost ~= '' then
        redis.call('ZADD', KEYS[i], score, member .. '|' .. new_cost)
      end
      changed = changed + 1
    end
  end
end
return changed
