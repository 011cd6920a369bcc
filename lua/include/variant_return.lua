-- variant_return.lua (included by cancel.lua and expire.lua): an order of an activity with
-- variants gives each of its units back to its own variant (include/variant_purchase.lua
-- says how the meta hash holds them). `items` is the order's "<vid>:<n>,..." text, from the
-- activity's items hash.
--
-- check_return(items) -> units, nil: the order's units in all, when every variant can take
--   its units back; or nil, {"inconsistent", remaining, total, vid} when a variant's
--   remaining would pass its total (its counters disagree: nothing is returned).
-- return_units(items): each variant's remaining up, sold down, `returned` bumped (a sold-out
--   flag of the variant is checked against it: units came back).

local function check_return(items)
  local units = 0
  for vid, n in string.gmatch(items, '([%w_-]+):(%d+)') do
    local v = 'v:' .. vid .. ':'
    local got = redis.call('HMGET', KEYS[1], v .. 'remaining', v .. 'total')
    n = tonumber(n)
    if not got[1] or tonumber(got[1]) + n > tonumber(got[2]) then
      return nil, {'inconsistent', got[1] or '', got[2] or '', vid}
    end
    units = units + n
  end
  return units, nil
end

local function return_units(items)
  for vid, n in string.gmatch(items, '([%w_-]+):(%d+)') do
    local v = 'v:' .. vid .. ':'
    redis.call('HINCRBY', KEYS[1], v .. 'remaining', n)
    redis.call('HINCRBY', KEYS[1], v .. 'sold', -tonumber(n))
    redis.call('HINCRBY', KEYS[1], v .. 'returned', 1)
  end
end
