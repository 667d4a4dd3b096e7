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


-- Every active hold (block or spent quota) in the hash `key`, at `now`:
-- a flat list {field, µs from now, ...} for the caller's view, and a map
-- field -> until (µs).
local function active(key, now)
  local flat = redis.call('HGETALL', key)
  local list, map = {}, {}
  for i = 1, #flat, 2 do
    local until_ = tonumber(flat[i + 1])
    if until_ and until_ > now then
      map[flat[i]] = until_
      list[#list + 1] = flat[i]
      list[#list + 1] = until_ - now
    end
  end
  return list, map
end
