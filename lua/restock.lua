-- restock.lua: change an activity's stock; total and remaining move together, atomically.
--
-- KEYS[1]  seckill:{<aid>}:meta   hash: total, remaining (-1 = unlimited), kind
-- ARGV[1]  units to add (an integer; negative removes unsold units)
-- ARGV[2]  the largest total an activity may have (what it may be created with); the
--          gateway always sends it (absent: no upper bound)
--
-- Returns:
--   {"ok", total, remaining}
--   {"insufficient_stock", remaining}   removing more than is unsold: nothing changes
--   {"over_maximum", total}             the total would pass ARGV[2]: nothing changes
--   {"not_countable"}                   unlimited stock, or red-envelope packets
--   {"uninitialized"}

local meta = redis.call('HMGET', KEYS[1], 'total', 'remaining', 'kind')
if not meta[1] then
  return {'uninitialized'}
end
local total, remaining = tonumber(meta[1]), tonumber(meta[2])
if total < 0 or (meta[3] and meta[3] ~= 'stock') then
  return {'not_countable'}
end
local add = tonumber(ARGV[1])
if remaining + add < 0 then
  return {'insufficient_stock', remaining}
end
local max_total = tonumber(ARGV[2])
if max_total and total + add > max_total then
  return {'over_maximum', total}
end
total = redis.call('HINCRBY', KEYS[1], 'total', add)
remaining = redis.call('HINCRBY', KEYS[1], 'remaining', add)
return {'ok', total, remaining}
