-- cancel.lua: undo one live order atomically: the stock comes back, the buyer's slot is freed,
-- the order is remembered as cancelled, and a cancel event follows the order on its stream
-- (so the orders worker applies it after the order itself, whatever the timing). For a
-- red-envelope grab, the packet itself goes back to the list, in the same step: it is never
-- lost, and never handed out twice.
--
-- KEYS[1]  seckill:{<aid>}:meta       hash (remaining, total, sold, kind, unlimited,
--                                     amount_given)
-- KEYS[2]  seckill:{<aid>}:buyers     hash: user id -> order id ("|c" suffix once confirmed)
-- KEYS[3]  seckill:{<aid>}:cancelled  hash: user id -> their latest cancelled order id
-- KEYS[4]  seckill:{<aid>}:orders     stream
-- KEYS[5]  seckill:{<aid>}:packets    list of unclaimed packets (kind "packets" only)
-- KEYS[6]  seckill:{<aid>}:amounts    hash: user id -> amount of their live grab (packets)
-- KEYS[7]  seckill:{<aid>}:holds      KEYS[8] seckill:{<aid>}:payments (a payment window's:
--          a cancelled order is no longer held, and an unpaid one no longer due)
-- KEYS[9]  seckill:{<aid>}:items      hash: order id -> "<vid>:<n>,..." (an activity with
--          variants: each unit goes back to its variant, include/variant_return.lua)
-- ARGV[1]  order id   ARGV[2] user id   ARGV[3] quantity   ARGV[4] activity id (data)
-- ARGV[5]  the operator who cancels it (validated by the gateway; "" or absent: none),
--          passed on in the cancel entry, so that its order.cancelled names them
--
-- Returns:
--   {"ok", remaining}            remaining is -1 for unlimited stock
--   {"already_cancelled"}
--   {"not_live"}                 the user's live order is another one (or none)
--   {"uninitialized"}
--   {"unmigrated"}               a stock meta hash without the `unlimited` flag (written
--                                before it): only the database can say; nothing changes
--   {"inconsistent", remaining, total}   giving the units back would exceed total: refused
--   {"no_amount"}                a live grab whose amount is unknown: refused, nothing changes
--   {"no_items"}                 an order of an activity with variants whose items are
--                                unknown: refused, nothing changes
--   {"inconsistent", remaining, total, vid}  a variant's units back would exceed its total

-- @include sale_window
-- @include variant_return

local remaining, total, kind, unlimited, variants = unpack(redis.call('HMGET', KEYS[1],
  'remaining', 'total', 'kind', 'unlimited', 'variants'))
if not remaining then
  return {'uninitialized'}
end
remaining, total = tonumber(remaining), tonumber(total)
local packets = kind == 'packets'
if not packets and not unlimited then
  return {'unmigrated'}
end
unlimited = unlimited == '1'
local order_id, uid, qty = ARGV[1], ARGV[2], tonumber(ARGV[3])

local live = redis.call('HGET', KEYS[2], uid)
if live then
  live = string.gsub(live, '|c$', '')
end
if live ~= order_id then
  if redis.call('HGET', KEYS[3], uid) == order_id then
    return {'already_cancelled'}
  end
  return {'not_live'}
end

local amount = nil
if packets then
  amount = redis.call('HGET', KEYS[6], uid)
  if not amount then
    return {'no_amount'}
  end
  qty = 1
end

local items = nil
if variants then
  items = KEYS[9] and redis.call('HGET', KEYS[9], order_id)
  if not items then
    return {'no_items'}
  end
  local units, refused = check_return(items)
  if refused then
    return refused
  end
  qty = units  -- the order's own record: its units, whatever the caller read
end
if not unlimited then
  if remaining + qty > total then
    return {'inconsistent', remaining, total}
  end
  remaining = redis.call('HINCRBY', KEYS[1], 'remaining', qty)
end
redis.call('HINCRBY', KEYS[1], 'sold', -qty)
if items then
  return_units(items)
end
if packets then
  redis.call('RPUSH', KEYS[5], amount)
  redis.call('HDEL', KEYS[6], uid)
  redis.call('HINCRBY', KEYS[1], 'amount_given', '-' .. amount)
end
redis.call('HDEL', KEYS[2], uid)
redis.call('HSET', KEYS[3], uid, order_id)
if KEYS[8] and redis.call('ZREM', KEYS[7], order_id) == 1 then
  redis.call('HDEL', KEYS[8], order_id)  -- it was due: never paid, now never to expire
end
local now_ms = redis_now_ms()
local entry = {'type', 'cancel', 'order_id', order_id, 'activity', ARGV[4], 'user', uid,
  'quantity', qty, 'ts', now_ms}
if ARGV[5] and ARGV[5] ~= '' then
  entry[#entry + 1] = 'operator'
  entry[#entry + 1] = ARGV[5]
end
redis.call('XADD', KEYS[4], '*', unpack(entry))
return {'ok', unlimited and -1 or remaining}
