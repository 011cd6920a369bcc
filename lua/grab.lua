-- grab.lua: the single authority on one red-envelope grab. Atomic: Redis runs it alone.
--
-- KEYS[1]  seckill:{<aid>}:meta     hash: kind ("packets"), starts_ms, ends_ms, remaining
--                                   (packets left), sold (packets grabbed), amount_given
--                                   (cents), seq (order sequence)
-- KEYS[2]  seckill:{<aid>}:buyers   hash: user id -> order id ("|c" suffix once stored)
-- KEYS[3]  seckill:{<aid>}:orders   stream of decided orders (the same stream as purchases)
-- KEYS[4]  seckill:{<aid>}:packets  list of the unclaimed packets, in cents (pre-split)
-- KEYS[5]  seckill:{<aid>}:amounts  hash: user id -> amount of their live grab, in cents
-- ARGV[1]  user id (already validated by the edge)
-- ARGV[2]  quantity (must be 1: one packet per user)
-- ARGV[3]  activity id, written into the order id and the stream entry (data, not a key)
-- ARGV[4]  the decision deadline, epoch ms on Redis's clock (0: none):
--          include/sale_opening.lua
-- then, with a payment window: holds, payments, expired (include/payment_hold.lua)
-- then the per-user rate limit's counters, ARGV[5..] its rates (include/rate_limit.lua)
--
-- Returns a flat array, first element the outcome:
--   {"expired", ms}                           past the deadline: nothing at all was done
--   {"rate_limited", ms}                      over SECKILL_USER_RATE: nothing else was done
--   {"ok", order_id, remaining, amount[, pay_by]}  remaining: packets left; amount: cents;
--                                             pay_by (ms) with a payment window
--   {"hold_expired", order_id}                this user's hold expired unpaid
--   {"payment_keys"}                          a payment window, and its keys not passed
--   {"already_purchased", order_id, amount}   idempotent repeat (order id may end in "|c")
--   {"not_started", starts_ms, now_ms}
--   {"ended"}
--   {"paused"}                                the operator paused the sale
--   {"sold_out"}                              no packet left
--   {"bad_quantity", 1}
--   {"wrong_kind", kind}                      not a packets activity (use purchase.lua)
--   {"uninitialized"}                         the meta hash is missing: Redis lost it
--   {"inconsistent", total, remaining, sold, listed}  the counters disagree: refused
--
-- The same opening as purchase.lua (include/sale_opening.lua: deadline, rate, existence,
-- kind, window on Redis's clock, pause), then the buyer (a winner repeating after the last
-- packet went still learns their order and amount), then the packet. The list is the authority on
-- what is left: a packet exists only in the list or in the amounts hash, never in both, never in
-- neither (cancel.lua pushes it back). Amounts stay strings end to end, so no number formatting
-- can alter them. The counters are checked on every grab, at O(1), as purchase.lua checks a
-- stock's: total = remaining + sold, none negative, and the list holds `remaining` packets; when
-- they disagree nothing is handed out until `seckill reconcile --repair` has made them agree with
-- the database.

-- @include sale_window
-- @include rate_limit
-- @include sale_opening
-- @include payment_hold

local now_ms = redis_now_ms()
local refused = sale_admits(now_ms)
if refused then
  return refused
end
-- The activity's fields, read once, by name: as HMGET gives them, strings or false (absent).
local starts_ms, ends_ms, kind, paused, payment_window, total, remaining, sold =
  unpack(redis.call('HMGET', KEYS[1], 'starts_ms', 'ends_ms', 'kind', 'paused',
    'payment_window', 'total', 'remaining', 'sold'))
refused = sale_closed('packets', starts_ms, ends_ms, kind, paused, now_ms)
if refused then
  return refused
end
do
  local total_n, remaining_n, sold_n = tonumber(total), tonumber(remaining), tonumber(sold)
  local listed = redis.call('LLEN', KEYS[4])
  if not (total_n and remaining_n and sold_n) or remaining_n < 0 or sold_n < 0
      or remaining_n + sold_n ~= total_n or listed ~= remaining_n then
    return {'inconsistent', total or '', remaining or '', sold or '', listed}
  end
end

local uid = ARGV[1]
local existing = redis.call('HGET', KEYS[2], uid)
if existing then
  return {'already_purchased', existing, redis.call('HGET', KEYS[5], uid)}
end

if ARGV[2] ~= '1' then
  return {'bad_quantity', 1}
end
-- The script's last key before the rate counters.
local hold, refusal = payment_hold(tonumber(payment_window), 6, #KEYS - (#ARGV - 4) / 2, uid,
  now_ms)
if refusal then
  return refusal
end

local amount = redis.call('LPOP', KEYS[4])
if not amount then
  return {'sold_out'}
end

remaining = redis.call('HINCRBY', KEYS[1], 'remaining', -1)
redis.call('HINCRBY', KEYS[1], 'sold', 1)
redis.call('HINCRBY', KEYS[1], 'amount_given', amount)
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
local order_id = string.format('%s-%013d-%06d', ARGV[3], now_ms, seq)
redis.call('HSET', KEYS[2], uid, order_id)
redis.call('HSET', KEYS[5], uid, amount)
if hold then
  redis.call('ZADD', hold[1], hold[3], order_id)
  redis.call('HSET', hold[2], order_id, 'due|1|' .. uid)
  redis.call('XADD', KEYS[3], '*',
    'type', 'purchase', 'kind', 'packets', 'order_id', order_id, 'activity', ARGV[3],
    'user', uid, 'quantity', 1, 'amount', amount, 'ts', now_ms, 'pay_by', hold[3])
  return {'ok', order_id, remaining, amount, hold[3]}
end
redis.call('XADD', KEYS[3], '*',
  'type', 'purchase', 'kind', 'packets', 'order_id', order_id, 'activity', ARGV[3],
  'user', uid, 'quantity', 1, 'amount', amount, 'ts', now_ms)
return {'ok', order_id, remaining, amount}
