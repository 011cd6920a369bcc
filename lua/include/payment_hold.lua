-- payment_hold.lua (included by purchase.lua, grab.lua and settle.lua): the payment window's
-- part of a sale. An activity whose meta has `payment_window` (seconds, > 0) holds each new
-- order until it is paid (pay.lua) or expires (expire.lua); its scripts are then passed three
-- more KEYS, at `first`:
--   KEYS[first]      seckill:{<tag>}:holds     sorted set: order id, scored by pay_by (ms)
--   KEYS[first + 1]  seckill:{<tag>}:payments  hash: order id -> "due|<qty>|<user>",
--                    "paid|<paid ms>|<pay_by>|<ref>|<qty>|<user>" or
--                    "expired|<pay_by>|<qty>|<user>"
--   KEYS[first + 2]  seckill:{<tag>}:expired   hash: user id -> their expired order id
--
-- payment_hold(window, first, last, uid, now_ms) returns (hold, refusal): without a window
-- (nil, nil); a buyer whose hold expired here (nil, {"hold_expired", order_id}): they may not
-- buy again; a caller whose copy of the activity did not pass the keys (`last`, the index of
-- the script's last key before any rate counters, is short) (nil, {"payment_keys"}), and it
-- runs again with them; else the hold record_order.lua writes: {holds, payments, pay_by}.

local function payment_hold(window, first, last, uid, now_ms)
  if not window or window <= 0 then
    return nil, nil
  end
  if last < first + 2 then
    return nil, {'payment_keys'}
  end
  local gone = redis.call('HGET', KEYS[first + 2], uid)
  if gone then
    return nil, {'hold_expired', gone}
  end
  return {KEYS[first], KEYS[first + 1], now_ms + window * 1000}, nil
end
