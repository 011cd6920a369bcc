-- variant_purchase.lua (included by purchase.lua): a purchase on an activity with variants.
-- The activity's meta hash lists its variants (`variants`: ids, comma-separated) and holds
-- each one's counters next to its own: v:<vid>:total, v:<vid>:remaining, v:<vid>:sold (and
-- v:<vid>:returned, bumped whenever units come back to it). The activity's total,
-- remaining and sold are the sums of its variants', so every check of the activity's counters
-- (purchase.lua's, cancel.lua's, the queue's bound) holds unchanged; each variant's own total =
-- remaining + sold holds the same way, moved in the same steps.
--
-- The gateway passes the items in the quantity's place (ARGV[2]) as "<vid>:<n>,<vid>:<n>",
-- and the activity's items hash (vid list per order id) as KEYS[4] (a variant activity is
-- never sharded: KEYS[4] is a sharded part's claims otherwise). A single-item purchase never
-- runs any of this.
--
-- variant_items(text, per_user_limit) -> items, units, encoded   (items: {vid, n, vid, n, ...})
--   or nil, nil, refusal: {"bad_quantity", ...} for a malformed list (a variant twice, a
--   quantity of 0); the gateway has refused those already. (One variant, "<vid>:<n>", is
--   matched at purchase.lua's top and never comes here.)
-- take_variants(items, remaining, v, v_left, v_sold, v_total) -> nil, writes once every item
--   can be taken from its variant, or the refusal: {"unknown_variant", vid}; {"sold_out"} (the
--   activity has no unit left); {"variant_sold_out", vid, left} (that variant has fewer than asked
--   while the activity has units); {"inconsistent", "v:<vid>", total, remaining, sold} (its
--   counters disagree). It writes nothing: `writes` is the variants' new counters as field/value
--   pairs, which purchase.lua writes in the same HSET as the activity's remaining and sold, after
--   its own checks of the activity's counters (all or nothing by construction: one write, after
--   every check). `v` (one variant only; nil: its counters are read here) is that variant's
--   fields' prefix "v:<vid>:", and v_left, v_sold, v_total its remaining, sold and total as
--   purchase.lua read them in its HMGET of the meta hash (one read, not two).

local function variant_items(text, per_user_limit)
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

-- One item's counters as read (strings): nil, left, sold when `n` units can be taken from it,
-- else the refusal.
local function check_variant(vid, n, raw_left, raw_sold, raw_total)
  local left, sold, total = tonumber(raw_left), tonumber(raw_sold), tonumber(raw_total)
  if not (left and sold and total) or left < 0 or sold < 0 or left + sold ~= total then
    return {'inconsistent', 'v:' .. vid, raw_total or '', raw_left or '', raw_sold or ''}
  elseif left < n then
    return {'variant_sold_out', vid, left}
  end
  return nil, left, sold
end

local function take_variants(items, remaining, v, v_left, v_sold, v_total)
  if v then  -- one variant, its counters read in purchase.lua's HMGET: no loop, no HMGET
    local vid, n = items[1], items[2]
    if not v_left then
      return {'unknown_variant', vid}
    elseif remaining == 0 then
      return {'sold_out'}
    end
    local refused, left, sold = check_variant(vid, n, v_left, v_sold, v_total)
    if refused then
      return refused
    end
    return nil, {v .. 'remaining', left - n, v .. 'sold', sold + n}
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
  local writes = {}
  for i = 1, #items, 2 do
    local j = (i - 1) * 3 / 2
    local refused, left, sold = check_variant(items[i], items[i + 1], got[j + 1], got[j + 2],
      got[j + 3])
    if refused then
      return refused
    end
    writes[#writes + 1] = fields[j + 1]
    writes[#writes + 1] = left - items[i + 1]
    writes[#writes + 1] = fields[j + 2]
    writes[#writes + 1] = sold + items[i + 1]
  end
  return nil, writes
end
