-- sluice: give back slots that were not used.
--
-- Mirrors LimiterCell::refund: nothing happens when a block voided the
-- slots since (the generation moved); a window slot is removed from the
-- log; a GCRA slot moves the arrival time back only when nothing was
-- charged after it (so give a lease's slots back latest first).
--
-- KEYS: 1 meta hash, 2 window zset, 3 gcra string
-- ARGV: 1 scope field, 2 generation, 3 'w'|'g', 4.. members (w) or
--       'before:after' (g, latest first)
-- Reply: how many slots were given back.

local generation = tonumber(redis.call('HGET', KEYS[1], 'g:' .. ARGV[1])) or 0
if generation ~= tonumber(ARGV[2]) then return 0 end
local given = 0
if ARGV[3] == 'w' then
  for i = 4, #ARGV do given = given + redis.call('ZREM', KEYS[2], ARGV[i]) end
elseif ARGV[3] == 'g' then
  local tat = tonumber(redis.call('GET', KEYS[3]))
  if not tat then return 0 end
  local changed = false
  for i = 4, #ARGV do
    local before, after = string.match(ARGV[i], '^(%d+):(%d+)$')
    if tonumber(after) == tat then
      tat = tonumber(before)
      changed = true
      given = given + 1
    end
  end
  if changed then redis.call('SET', KEYS[3], string.format('%d', tat), 'KEEPTTL') end
end
return given
