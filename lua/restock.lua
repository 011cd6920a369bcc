-- restock.lua: change an activity's stock; total and remaining move together, atomically.
--
-- KEYS[1]  seckill:{<aid>}:meta   hash: total, remaining, kind, unlimited ("1": unlimited),
--                                 sold, held (a sharded activity's part)
-- ARGV[1]  units to add (an integer; negative removes unsold units)
-- ARGV[2]  the largest total an activity may have (what it may be created with); the
--          gateway always sends it (absent: no upper bound)
--
-- Returns:
--   {"ok", total, remaining}
--   {"insufficient_stock", remaining}   removing more than is unsold: nothing changes
--   {"over_maximum", total}             the total would pass ARGV[2]: nothing changes
--   {"not_countable"}                   unlimited stock, or red-envelope packets
--   {"unmigrated"}                      no `unlimited` flag (a meta hash from before it)
--   {"inconsistent"}                    the counters disagree (see purchase.lua): a restock
--                                       would hide it; `seckill reconcile --repair` first
--   {"uninitialized"}

local meta = redis.call('HMGET', KEYS[1], 'total', 'remaining', 'kind', 'unlimited', 'sold',
  'held')
if not meta[1] then
  return {'uninitialized'}
end
if meta[3] and meta[3] ~= 'stock' then
  return {'not_countable'}
end
if not meta[4] then
  return {'unmigrated'}
end
if meta[4] == '1' then
  return {'not_countable'}
end
local total, remaining = tonumber(meta[1]), tonumber(meta[2])
local sold, held = tonumber(meta[5] or 0), tonumber(meta[6] or 0)
if remaining < 0 or sold < 0 or held < 0 or remaining + held + sold ~= total then
  return {'inconsistent'}
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
