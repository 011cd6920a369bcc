-- restock.lua: change an activity's stock; total and remaining move together, atomically.
--
-- KEYS[1]  seckill:{<aid>}:meta   hash: total, remaining, kind, unlimited ("1": unlimited),
--                                 sold, held (a sharded activity's part)
-- ARGV[1]  units to add (an integer; negative removes unsold units)
-- ARGV[2]  the largest total an activity may have (what it may be created with); the
--          gateway always sends it (absent: no upper bound)
-- ARGV[3]  (an activity with variants: required) the variant restocked: its total and
--          remaining move with the activity's (include/variant_purchase.lua's fields)
--
-- Returns:
--   {"ok", total, remaining[, variant total, variant remaining]}
--   {"insufficient_stock", remaining}   removing more than is unsold: nothing changes
--   {"over_maximum", total}             the total would pass ARGV[2]: nothing changes
--   {"not_countable"}                   unlimited stock, or red-envelope packets
--   {"unmigrated"}                      no `unlimited` flag (a meta hash from before it)
--   {"inconsistent"}                    the counters disagree (see purchase.lua): a restock
--                                       would hide it; `seckill reconcile --repair` first
--   {"uninitialized"}
--   {"variant_required"}  {"no_variants"}  {"unknown_variant", vid}   with variants: ARGV[3]
--                                       missing, given without variants, or not a variant
--   {"insufficient_stock", remaining}   also: removing more than the variant has unsold

local total, remaining, kind, unlimited, sold, held, variants = unpack(redis.call('HMGET',
  KEYS[1], 'total', 'remaining', 'kind', 'unlimited', 'sold', 'held', 'variants'))
if not total then
  return {'uninitialized'}
end
if kind and kind ~= 'stock' then
  return {'not_countable'}
end
if not unlimited then
  return {'unmigrated'}
end
if unlimited == '1' then
  return {'not_countable'}
end
total, remaining = tonumber(total), tonumber(remaining)
sold, held = tonumber(sold or 0), tonumber(held or 0)
if remaining < 0 or sold < 0 or held < 0 or remaining + held + sold ~= total then
  return {'inconsistent'}
end
local add = tonumber(ARGV[1])
local vid, v = ARGV[3], nil
if variants and not vid then
  return {'variant_required'}
elseif vid and vid ~= '' then
  if not variants then
    return {'no_variants'}
  end
  v = 'v:' .. vid .. ':'
  local got = redis.call('HMGET', KEYS[1], v .. 'total', v .. 'remaining', v .. 'sold')
  if not got[1] then
    return {'unknown_variant', vid}
  end
  local v_total, v_left, v_sold = tonumber(got[1]), tonumber(got[2]), tonumber(got[3])
  if v_left < 0 or v_sold < 0 or v_left + v_sold ~= v_total then
    return {'inconsistent'}
  end
  if v_left + add < 0 then
    return {'insufficient_stock', v_left}
  end
end
if remaining + add < 0 then
  return {'insufficient_stock', remaining}
end
local max_total = tonumber(ARGV[2])
if max_total and total + add > max_total then
  return {'over_maximum', total}
end
total = redis.call('HINCRBY', KEYS[1], 'total', add)
remaining = redis.call('HINCRBY', KEYS[1], 'remaining', add)
if v then
  if add > 0 then
    redis.call('HINCRBY', KEYS[1], v .. 'returned', 1)
  end
  return {'ok', total, remaining, redis.call('HINCRBY', KEYS[1], v .. 'total', add),
    redis.call('HINCRBY', KEYS[1], v .. 'remaining', add)}
end
return {'ok', total, remaining}
