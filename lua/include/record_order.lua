-- record_order.lua (included by purchase.lua and settle.lua): write one decided order of
-- stock. KEYS[1] meta, KEYS[2] buyers, KEYS[3] orders stream, as in purchase.lua.
--
-- record_order(uid, qty, aid, now_ms, step) adds `qty` to sold, takes the next order
-- sequence and returns the new order id, after recording the buyer and adding the order to
-- the stream. `step` is the number of parts: part j of a sharded activity numbers its orders
-- j+n, j+2n, ... (its seq starts at j), so order ids never collide across parts and an order
-- id names its part (seq mod n). Unsharded: step 1, as always. `hold` (include/
-- payment_hold.lua; nil without a payment window) is {holds, payments, pay_by}: the order is
-- held until pay_by, in the same step. `account` (nil unless the activity is limited by
-- person, when `uid` is the person's key) is the account that bought: the entry names it.
-- `items` (nil unless the activity has variants) is the order's "<vid>:<n>,..." text: the
-- entry carries it and the items hash (KEYS[4]) keeps it under the order id, for the cancel
-- and the expiry that return each unit to its variant. `counted`: the caller has added `qty`
-- to sold already (an unsharded purchase writes all its counters in one HSET).

local function record_order(uid, qty, aid, now_ms, step, hold, account, items, counted)
  if not counted then
    redis.call('HINCRBY', KEYS[1], 'sold', qty)
  end
  local seq = redis.call('HINCRBY', KEYS[1], 'seq', step)
  local order_id = string.format('%s-%013d-%06d', aid, now_ms, seq)
  redis.call('HSET', KEYS[2], uid, order_id)
  if not hold and not account and items then  -- variants, the common way: one entry, as is
    redis.call('HSET', KEYS[4], order_id, items)
    redis.call('XADD', KEYS[3], '*', 'type', 'purchase', 'order_id', order_id, 'activity',
      aid, 'user', uid, 'quantity', qty, 'ts', now_ms, 'items', items)
    return order_id
  end
  if not (hold or items) then  -- the common purchases, a user's or a person's: no list to build
    if account then
      redis.call('XADD', KEYS[3], '*', 'type', 'purchase', 'order_id', order_id, 'activity',
        aid, 'user', uid, 'quantity', qty, 'ts', now_ms, 'account', account)
    else
      redis.call('XADD', KEYS[3], '*', 'type', 'purchase', 'order_id', order_id, 'activity',
        aid, 'user', uid, 'quantity', qty, 'ts', now_ms)
    end
    return order_id
  end
  local entry = {'type', 'purchase', 'order_id', order_id, 'activity', aid, 'user', uid,
    'quantity', qty, 'ts', now_ms}
  if hold then
    redis.call('ZADD', hold[1], hold[3], order_id)
    redis.call('HSET', hold[2], order_id, 'due|' .. qty .. '|' .. uid)
    entry[#entry + 1] = 'pay_by'
    entry[#entry + 1] = hold[3]
  end
  if account then
    entry[#entry + 1] = 'account'
    entry[#entry + 1] = account
  end
  if items then  -- variants (include/variant_purchase.lua): KEYS[4] is the items hash
    redis.call('HSET', KEYS[4], order_id, items)
    entry[#entry + 1] = 'items'
    entry[#entry + 1] = items
  end
  redis.call('XADD', KEYS[3], '*', unpack(entry))
  return order_id
end
