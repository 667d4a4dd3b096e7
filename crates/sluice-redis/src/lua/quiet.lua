-- sluice: how many names in a credential's heartbeat set have not beaten
-- for `quiet` µs (beat.rs). A process back from a spell of local
-- decisions asks it with `quiet` the time since its spell began: a name
-- that has not beaten since is a process that has not reached Redis
-- since (still deciding locally, or idle), whose local starts Redis's
-- logs may not hold. Read only.
--
-- KEYS: 1 the heartbeat set
-- ARGV: 1 now (µs; '' = the server's TIME), 2 quiet µs
-- Reply: the number of such names

local now = clock(ARGV[1])
return redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. int(now - tonumber(ARGV[2])))
