-- purchase.lua: the single authority on one purchase. Atomic: Redis runs it alone.
--
-- KEYS[1]  seckill:{<aid>}:meta    hash: starts_ms, ends_ms, per_user_limit, remaining
--                                  (-1 = unlimited), sold (units), seq (order sequence),
--                                  kind (absent or "stock")
-- KEYS[2]  seckill:{<aid>}:buyers  hash: user id -> order id (suffix "|c" once the orders
--                                  worker has stored it in the database)
-- KEYS[3]  seckill:{<aid>}:orders  stream of decided orders (never trimmed by length)
-- ARGV[1]  user id (already validated by the edge)
-- ARGV[2]  quantity (integer >= 1, already validated against the cached limit)
-- ARGV[3]  activity id, written into the order id and the stream entry (data, not a key)
-- KEYS[4..], ARGV[4..]  the per-user rate limit's counters and rates (include/rate_limit.lua)
--
-- Returns a flat array, first element the outcome:
--   {"rate_limited", ms}               over SECKILL_USER_RATE: nothing else was done
--   {"ok", order_id, remaining}        remaining is -1 for unlimited stock
--   {"already_purchased", order_id}    idempotent repeat: the earlier order (may end in "|c")
--   {"not_started", starts_ms, now_ms}
--   {"ended"}
--   {"sold_out"}
--   {"insufficient_stock", remaining}  some left, fewer than asked
--   {"bad_quantity", per_user_limit}
--   {"uninitialized"}                  the meta hash is missing: Redis lost the activity
--   {"wrong_kind", kind}               red-envelope packets are grabbed with grab.lua
--
-- The opening checks (rate, existence, kind, window on Redis's clock) are include/
-- sale_opening.lua, shared with grab.lua. The buyer check comes before the stock check so
-- that a winner repeating the purchase after the sale sold out still learns their order id.

local sale_kind = 'stock'
local sale_fields = {'per_user_limit', 'remaining'}
-- @include sale_opening
local per_user_limit = tonumber(meta[4])
local remaining = tonumber(meta[5])

local uid = ARGV[1]
local existing = redis.call('HGET', KEYS[2], uid)
if existing then
  return {'already_purchased', existing}
end

local qty = tonumber(ARGV[2])
if not qty or qty < 1 or qty > per_user_limit or qty ~= math.floor(qty) then
  return {'bad_quantity', per_user_limit}
end

if remaining >= 0 then
  if remaining == 0 then
    return {'sold_out'}
  end
  if remaining < qty then
    return {'insufficient_stock', remaining}
  end
  remaining = redis.call('HINCRBY', KEYS[1], 'remaining', -qty)
end

redis.call('HINCRBY', KEYS[1], 'sold', qty)
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
local order_id = string.format('%s-%013d-%06d', ARGV[3], now_ms, seq)
redis.call('HSET', KEYS[2], uid, order_id)
redis.call('XADD', KEYS[3], '*',
  'type', 'purchase', 'order_id', order_id, 'activity', ARGV[3], 'user', uid,
  'quantity', qty, 'ts', now_ms)
return {'ok', order_id, remaining}
