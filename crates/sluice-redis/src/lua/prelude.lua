-- sluice: what every script shares; the Rust side puts it in front of each.

-- An integer as a Redis command takes it (no exponent, no fraction).
local function int(x) return string.format('%d', x) end

-- The time of this step in µs: `arg` when a test gives one, else the
-- server's clock ('').
local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A TTL of `us` µs as whole milliseconds, at least one.
local function ttl_ms(us)
  local ms = math.ceil(us / 1000)
  if ms < 1 then ms = 1 end
  return int(ms)
end

-- Makes `key` live at least `us` µs more (never shortens it).
local function extend(key, us)
  local want = math.ceil(us / 1000)
  if want < 1 then want = 1 end
  local current = redis.call('PTTL', key)
  if current >= 0 and current >= want then return end
  redis.call('PEXPIRE', key, int(want))
end

