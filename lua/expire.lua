-- expire.lua: one step of the payment window's expiry on one activity (or one part of a
-- sharded one): up to ARGV[2] held orders whose pay_by has passed (Redis's clock) expire, in
-- one atomic step each call. An expired order's units (or its packet) go back on sale, the
-- buyer's slot is freed but the buyer is remembered in `expired` (no second purchase:
-- hold_expired), its payment record says "expired", and a cancel entry with reason "expired"
-- follows the order on its stream, so the orders worker stores it exactly once.
--
-- KEYS[1] :meta  KEYS[2] :buyers  KEYS[3] :cancelled  KEYS[4] :orders  KEYS[5] :packets
-- KEYS[6] :amounts  KEYS[7] :holds  KEYS[8] :payments  KEYS[9] :expired   (one hash tag)
-- KEYS[10] :items (an activity with variants: each unit goes back to its variant)
-- ARGV[1]  activity id (data)   ARGV[2] the most orders to expire in this call
--
-- Returns {"expired", orders expired, units returned, orders still past due}: the caller
-- calls again at once while the last is > 0. {"uninitialized"} when Redis lost the activity.
--
-- Exactly once: an order leaves `holds` in the same step that returns its units, and pay.lua
-- only pays an order still in `holds` before its pay_by: a payment and an expiry racing for
-- one order are serialized by Redis, the second sees the first's record. A runner killed
-- between calls leaves every unexpired order in `holds` for the next call.

-- @include sale_window
-- @include variant_return

local remaining, kind, unlimited, variants = unpack(redis.call('HMGET', KEYS[1], 'remaining',
  'kind', 'unlimited', 'variants'))
if not remaining then
  return {'uninitialized'}
end
local packets = kind == 'packets'
-- Only the flag says unlimited (purchase.lua): a counted activity gets its units back even if
-- its counter reads negative (then it is inconsistent, and refuses to sell until repaired).
local counted = unlimited ~= '1'
local now_ms = redis_now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now_ms, 'WITHSCORES', 'LIMIT', 0,
  tonumber(ARGV[2]))
local expired, units = 0, 0
for i = 1, #due, 2 do
  local order_id, pay_by = due[i], due[i + 1]
  redis.call('ZREM', KEYS[7], order_id)
  local state = redis.call('HGET', KEYS[8], order_id)
  local qty, uid = nil, nil
  if state then
    qty, uid = string.match(state, '^due|(%d+)|(.*)$')
  end
  if qty then
    qty = tonumber(qty)
    local live = redis.call('HGET', KEYS[2], uid)
    if live then
      live = string.gsub(live, '|c$', '')
    end
    if live == order_id then
      local back = qty
      if packets then
        local amount = redis.call('HGET', KEYS[6], uid)
        back = 0
        if amount then  -- the packet goes back to the list, as cancel.lua does
          redis.call('RPUSH', KEYS[5], amount)
          redis.call('HDEL', KEYS[6], uid)
          redis.call('HINCRBY', KEYS[1], 'amount_given', '-' .. amount)
          back = 1
        end
        qty = 1
      end
      if counted then
        redis.call('HINCRBY', KEYS[1], 'remaining', back)
      end
      local items = variants and KEYS[10] and redis.call('HGET', KEYS[10], order_id)
      if items then
        return_units(items)
      end
      redis.call('HINCRBY', KEYS[1], 'sold', -qty)
      redis.call('HDEL', KEYS[2], uid)
      redis.call('HSET', KEYS[3], uid, order_id)
      units = units + back
    end
    redis.call('HSET', KEYS[9], uid, order_id)
    redis.call('HSET', KEYS[8], order_id, 'expired|' .. pay_by .. '|' .. qty .. '|' .. uid)
    redis.call('HINCRBY', KEYS[1], 'expired', 1)
    redis.call('XADD', KEYS[4], '*',
      'type', 'cancel', 'reason', 'expired', 'order_id', order_id, 'activity', ARGV[1],
      'user', uid, 'quantity', qty, 'ts', now_ms)
    expired = expired + 1
  end
end
local left = redis.call('ZCOUNT', KEYS[7], '-inf', now_ms)
return {'expired', expired, units, left}
