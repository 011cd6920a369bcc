-- pay.lua: a payment for a held order (an activity with a payment window). Atomic with
-- expire.lua on the same keys: for one order exactly one of them wins, and the loser is told.
--
-- KEYS[1]  seckill:{<tag>}:meta      KEYS[2] :holds    KEYS[3] :payments    KEYS[4] :orders
--          (<tag>: the activity id, or the buyer's home part of a sharded activity)
-- ARGV[1]  order id   ARGV[2] payment reference (validated by the gateway, no "|")
-- ARGV[3]  activity id (data, for the stream entry)
-- ARGV[4]  the amount paid, cents (optional, validated by the gateway; "" or absent: none):
--          passed on in the "paid" entry, so the orders worker stores it with the payment
-- ARGV[5]  the operator who records the payment by hand (optional, validated by the
--          gateway; "" or absent: the payment provider's), passed on in the "paid" entry
--
-- Returns:
--   {"paid", ref, paid_ms}           paid now: the hold is gone, a "paid" entry follows the
--                                    order on its stream (the orders worker stores it)
--   {"paid", ref, paid_ms, "again"}  the same reference paid it before: the same answer
--   {"already_paid", ref}            paid before with another reference
--   {"payment_expired", pay_by}      pay_by has passed (expired, or about to be: the next
--                                    expiry step returns its units)
--   {"unknown"}                      no payment record here: not a held order of this part
--   {"uninitialized"}                Redis lost the activity

-- @include sale_window

local state = redis.call('HGET', KEYS[3], ARGV[1])
if not state then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return {'uninitialized'}
  end
  return {'unknown'}
end
local kind = string.match(state, '^(%a+)|')
if kind == 'paid' then
  local paid_ms, ref = string.match(state, '^paid|(%d+)|%d+|([^|]*)|')
  if ref == ARGV[2] then
    return {'paid', ref, tonumber(paid_ms), 'again'}
  end
  return {'already_paid', ref}
end
if kind == 'expired' then
  return {'payment_expired', tonumber(string.match(state, '^expired|(%d+)|'))}
end
local now_ms = redis_now_ms()
local pay_by = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]))
if pay_by == nil or now_ms >= pay_by then
  return {'payment_expired', pay_by or now_ms}
end
local rest = string.sub(state, #'due|' + 1)  -- "<qty>|<user>"
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1],
  'paid|' .. now_ms .. '|' .. string.format('%d', pay_by) .. '|' .. ARGV[2] .. '|' .. rest)
redis.call('HINCRBY', KEYS[1], 'paid', 1)
local entry = {'type', 'paid', 'order_id', ARGV[1], 'activity', ARGV[3], 'ref', ARGV[2],
  'ts', now_ms}
if ARGV[4] and ARGV[4] ~= '' then
  entry[#entry + 1] = 'amount'
  entry[#entry + 1] = ARGV[4]
end
if ARGV[5] and ARGV[5] ~= '' then
  entry[#entry + 1] = 'operator'
  entry[#entry + 1] = ARGV[5]
end
redis.call('XADD', KEYS[4], '*', unpack(entry))
return {'paid', ARGV[2], now_ms}
