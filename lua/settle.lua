-- settle.lua: the end of a sharded purchase that borrowed (purchase.lua answered "borrow"):
-- the home part takes in what the other parts lent (lend.lua), then either sells to the
-- claim's buyer or gives everything back to its own stock. Atomic, on the home part.
--
-- KEYS[1]  seckill:{<home tag>}:meta      KEYS[2] :buyers    KEYS[3] :orders
-- KEYS[4]  seckill:{<home tag>}:claims    hash: user id -> "<claim id>|<held>"
-- KEYS[5]  seckill:{<home tag>}:received  hash: "<claim id>@<donor part>" -> units received
-- ARGV[1]  user id, or "<person key>|<account>" (as purchase.lua's)   ARGV[2] quantity
-- ARGV[3]  activity id (data)   ARGV[4] claim id
-- ARGV[5]  the purchase's decision deadline, epoch ms on Redis's clock (0: none)
-- ARGV[6..] pairs: a donor's part number, the units it lent to this claim
-- KEYS[6..8] with a payment window: holds, payments, expired (include/payment_hold.lua)
--
-- Returns:
--   {"ok", order_id, remaining[, pay_by]}
--   {"payment_keys"}                   a payment window, and its keys were not passed
--   {"sold_out"}                       nothing here and nothing lent: every part was empty
--   {"insufficient_stock", remaining}  fewer units than asked, everywhere together
--   {"already_purchased", order_id}    the claim was taken over and that purchase won
--   {"superseded"}                     the claim was taken over (or released) meanwhile
--   {"expired", ms}                    past the purchase's deadline by ms: nothing sold, the
--                                      claim's units back in this part's stock
--   {"ended"}                          the sale ended meanwhile: the same
--   {"expired"}                        the claim is older than SETTLE_LIMIT_MS: nothing
--                                      changes (a transfer left in transit is delivered by
--                                      `seckill reconcile --repair`, never twice)
--   {"uninitialized"}
--
-- The lent units join this part's stock whatever the outcome (they are the sale's, not the
-- claim's), so a claim taken over or given up strands nothing.

local SETTLE_LIMIT_MS = 60000
-- @include sale_window
-- @include record_order
-- @include receive_units
-- @include payment_hold

local remaining, shards, payment_window, ends_ms = unpack(redis.call('HMGET', KEYS[1],
  'remaining', 'shards', 'payment_window', 'ends_ms'))
if not remaining then
  return {'uninitialized'}
end
local now_ms = redis_now_ms()
local claim_id = ARGV[4]
if now_ms - tonumber(string.match(claim_id, '^(%d+):')) > SETTLE_LIMIT_MS then
  return {'expired'}
end
for i = 6, #ARGV - 1, 2 do
  receive_units(KEYS[5], claim_id, ARGV[i], tonumber(ARGV[i + 1]))
end
remaining = tonumber(redis.call('HGET', KEYS[1], 'remaining'))  -- after the units received

local qty = tonumber(ARGV[2])
local uid, account = string.match(ARGV[1], '^([^|]*)|(.*)$')
if not uid then
  uid = ARGV[1]
end
local claim = redis.call('HGET', KEYS[4], uid)
local held = nil
if claim and string.sub(claim, 1, #claim_id + 1) == claim_id .. '|' then
  held = tonumber(string.sub(claim, #claim_id + 2))
end
if not held then
  local existing = redis.call('HGET', KEYS[2], uid)
  if existing then
    return {'already_purchased', existing}
  end
  return {'superseded'}
end
redis.call('HDEL', KEYS[4], uid)
redis.call('HINCRBY', KEYS[1], 'held', -held)
local deadline_ms = tonumber(ARGV[5]) or 0
if deadline_ms > 0 and now_ms > deadline_ms then
  redis.call('HINCRBY', KEYS[1], 'remaining', held)
  return {'expired', now_ms - deadline_ms}
end
-- Ended while the units were borrowed (the operator's end): no order after the end.
if ends_ms and now_ms >= tonumber(ends_ms) then
  redis.call('HINCRBY', KEYS[1], 'remaining', held)
  return {'ended'}
end
if remaining + held < qty then
  remaining = redis.call('HINCRBY', KEYS[1], 'remaining', held)
  if remaining == 0 then
    return {'sold_out'}
  end
  return {'insufficient_stock', remaining}
end
local hold, refusal = payment_hold(tonumber(payment_window), 6, #KEYS, uid, now_ms)
if refusal then  -- nothing sold: the claim's units go back to this part's stock
  redis.call('HINCRBY', KEYS[1], 'remaining', held)
  return refusal
end
remaining = redis.call('HINCRBY', KEYS[1], 'remaining', held - qty)
local order_id = record_order(uid, qty, ARGV[3], now_ms, tonumber(shards), hold, account)
if hold then
  return {'ok', order_id, remaining, hold[3]}
end
return {'ok', order_id, remaining}
