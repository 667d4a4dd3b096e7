-- sluice: settle a reservation whose answer never came, by its id.
--
-- A reservation that timed out is an unknown: Redis may have charged it
-- (the answer was lost or late) or not yet (the command still queued, or
-- never arrived). This script makes it "never charged" either way: it
-- removes whatever the reservation logged, and leaves a mark under its id,
-- so that the reservation, should it still arrive, finds the mark and
-- charges nothing (reserve.lua and spend.lua look for it first). A GCRA
-- bucket's arrival time is left as it is (it cannot tell one charge from
-- the next): at worst the bucket under-spends the slots of that one
-- reservation.
--
-- KEYS: 1 the reservation's mark, 2.. the sorted sets it may have charged
-- ARGV: 1 how long the mark lives (µs), 2.. the members it would have logged
-- Reply: how many log entries were removed

redis.call('SET', KEYS[1], '1', 'PX', ttl_ms(tonumber(ARGV[1])))
local removed = 0
for k = 2, #KEYS do
  for i = 2, #ARGV do removed = removed + redis.call('ZREM', KEYS[k], ARGV[i]) end
end
return removed
