-- variant_purchase.lua (included by purchase.lua): a purchase on an activity with variants
-- (issue #26). The activity's meta hash lists its variants (`variants`: ids, comma-separated)
-- and holds each one's counters next to its own: v:<vid>:total, v:<vid>:remaining,
-- v:<vid>:sold (and v:<vid>:returned, bumped whenever units come back to it). The activity's
-- total, remaining and sold are the sums of its variants', so every check of the activity's
-- counters (purchase.lua's, cancel.lua's, the queue's bound) holds unchanged; each variant's
-- own total = remaining + sold holds the same way, moved in the same steps.
--
-- The gateway passes the items in the quantity's place (ARGV[2]) as "<vid>:<n>,<vid>:<n>",
-- and the activity's items hash (vid list per order id) as KEYS[4] (a variant activity is
-- never sharded: KEYS[4] is a sharded part's claims otherwise). A single-item purchase never
-- runs any of this.
--
-- variant_items(text) -> items, units, encoded   (items: {vid, n, vid, n, ...})
--   or nil, nil, refusal: {"bad_quantity", ...} for a malformed list (a variant twice, a
--   quantity of 0); the gateway has refused those already.
-- take_variants(items, remaining, units, read) -> nil, counted once the units are taken from
--   their variants, or the refusal: {"unknown_variant", vid}; {"sold_out"} (the activity has
--   no unit left); {"variant_sold_out", vid, left} (that variant has fewer than asked while
--   the activity has units); {"inconsistent", "v:<vid>", total, remaining, sold} (its
--   counters disagree); {"insufficient_stock", remaining} (the activity has fewer than its
--   variants say: counters that disagree, never written into). All of an order's items are
--   checked before anything is written: all or nothing. `read` (one variant only; nil: read
--   here) is {that variant's remaining, sold, total, the activity's sold} as purchase.lua read
--   them in its HMGET of the meta hash: then the activity's remaining and sold are written in
--   the same HSET as the variant's, and `counted` is true (the caller writes neither again).

local function variant_items(text, per_user_limit)
  -- One variant, the common purchase: matched whole, so the text is already canonical.
  local one, n1 = string.match(text, '^([%w_-]+):([1-9]%d*)$')
  if one then
    return {one, tonumber(n1)}, tonumber(n1), text
  end
  local items, units, seen, parts = {}, 0, {}, {}
  for vid, n in string.gmatch(text, '([%w_-]+):(%d+)') do
    n = tonumber(n)
    if n < 1 or seen[vid] then
      return nil, nil, {'bad_quantity', per_user_limit}
    end
    seen[vid] = true
    items[#items + 1] = vid
    items[#items + 1] = n
    parts[#parts + 1] = vid .. ':' .. n
    units = units + n
  end
  if units == 0 then
    return nil, nil, {'bad_quantity', per_user_limit}
  end
  return items, units, table.concat(parts, ',')
end

local function take_variants(items, remaining, units, read)
  if #items == 2 and read then  -- one variant: the same steps, in one read and one write
    local v, n = 'v:' .. items[1] .. ':', items[2]
    local left, sold, total = tonumber(read[1]), tonumber(read[2]), tonumber(read[3])
    if not read[1] then
      return {'unknown_variant', items[1]}
    elseif remaining == 0 then
      return {'sold_out'}
    elseif not (sold and total) or left < 0 or sold < 0 or left + sold ~= total then
      return {'inconsistent', v, read[3] or '', read[1], read[2] or ''}
    elseif left < n then
      return {'variant_sold_out', items[1], left}
    elseif remaining < n then
      return {'insufficient_stock', remaining}
    end
    -- Its counters and the activity's in one write (all read by this same script, nothing
    -- ran between): one command, each written to the AOF, where there were three (an HSET
    -- and two HINCRBYs).
    redis.call('HSET', KEYS[1], v .. 'remaining', left - n, v .. 'sold', sold + n,
      'remaining', remaining - n, 'sold', tonumber(read[4]) + n)
    return nil, true
  end
  local fields = {}
  for i = 1, #items, 2 do
    local v = 'v:' .. items[i] .. ':'
    fields[#fields + 1] = v .. 'remaining'
    fields[#fields + 1] = v .. 'sold'
    fields[#fields + 1] = v .. 'total'
  end
  local got = redis.call('HMGET', KEYS[1], unpack(fields))
  for i = 1, #items, 2 do
    if not got[(i - 1) * 3 / 2 + 1] then
      return {'unknown_variant', items[i]}
    end
  end
  if remaining == 0 then
    return {'sold_out'}
  end
  for i = 1, #items, 2 do
    local j = (i - 1) * 3 / 2
    local left, sold, total = tonumber(got[j + 1]), tonumber(got[j + 2]), tonumber(got[j + 3])
    if not (left and sold and total) or left < 0 or sold < 0 or left + sold ~= total then
      return {'inconsistent', 'v:' .. items[i], got[j + 3] or '', got[j + 1] or '',
        got[j + 2] or ''}
    end
    if left < items[i + 1] then
      return {'variant_sold_out', items[i], left}
    end
  end
  if remaining < units then
    return {'insufficient_stock', remaining}
  end
  for i = 1, #items, 2 do
    local v = 'v:' .. items[i] .. ':'
    redis.call('HINCRBY', KEYS[1], v .. 'remaining', -items[i + 1])
    redis.call('HINCRBY', KEYS[1], v .. 'sold', items[i + 1])
  end
  return nil, false
end
