-- purchase.lua: the single authority on one purchase. Atomic: Redis runs it alone.
--
-- KEYS[1]  seckill:{<tag>}:meta    hash: starts_ms, ends_ms, per_user_limit, unlimited
--                                  ("1" unlimited stock, "0" counted), total, remaining,
--                                  sold (units), seq (order sequence), kind (absent or
--                                  "stock"); sharded: shards, part, held (units held by
--                                  claims)
-- KEYS[2]  seckill:{<tag>}:buyers  hash: user id -> order id (suffix "|c" once the orders
--                                  worker has stored it in the database)
-- KEYS[3]  seckill:{<tag>}:orders  stream of decided orders (never trimmed by length)
-- KEYS[4]  (sharded only) seckill:{<tag>}:claims   hash: user id -> "<claim id>|<held>"
--          (with variants, never sharded) seckill:{<tag>}:items  hash: order id -> its items
-- ARGV[1]  user id (already validated by the edge); on a `limit_by: person` activity
--          "<person key>|<account>" (ids have no "|"): the buyer is the person (the buyers,
--          claims, holds and expired hashes are keyed by the person key: one purchase per
--          person), and the order's stream entry also names the account that bought
-- ARGV[2]  quantity (integer >= 1, already validated against the cached limit); with
--          variants, the items instead: "<vid>:<n>,<vid>:<n>" (include/variant_purchase.lua)
-- ARGV[3]  activity id, written into the order id and the stream entry (data, not a key)
-- ARGV[4]  the decision deadline, epoch ms on Redis's clock (0: none): past it, nothing is
--          done (include/sale_opening.lua)
-- then, with a payment window (meta payment_window > 0), holds, payments, expired
--                                  (include/payment_hold.lua)
-- then the per-user rate limit's counters, ARGV[5..] its rates (include/rate_limit.lua)
--
-- <tag> is the activity id, or for part j of a sharded activity the part's tag (seckill/
-- store/shards.py); a sharded purchase always runs on the buyer's home part.
--
-- Returns a flat array, first element the outcome:
--   {"expired", ms}                    past the deadline by ms: nothing at all was done
--   {"rate_limited", ms}               over SECKILL_USER_RATE: nothing else was done
--   {"ok", order_id, remaining[, pay_by]}  remaining is -1 for unlimited stock (this
--                                      part's); pay_by (ms) with a payment window
--   {"unmigrated"}                     the meta hash has no `unlimited` flag (written before
--                                      it was): only the database can say; nothing was done
--   {"inconsistent", total, remaining, sold, held}  the counters disagree (below): refused
--   {"hold_expired", order_id}         this buyer's hold expired unpaid: no second purchase
--   {"payment_keys"}                   a payment window, and its keys were not passed
--   {"already_purchased", order_id}    idempotent repeat: the earlier order (may end in "|c")
--   {"not_started", starts_ms, now_ms}
--   {"ended"}
--   {"paused"}                         the operator paused the sale (meta paused = "1")
--   {"sold_out"}
--   {"insufficient_stock", remaining}  some left, fewer than asked
--   {"bad_quantity", per_user_limit}
--   {"uninitialized"}                  the meta hash is missing: Redis lost the activity
--   {"wrong_kind", kind}               red-envelope packets are grabbed with grab.lua
-- and with variants: {"unknown_variant", vid}, {"variant_sold_out", vid, left},
--   {"variant_required"} (a plain quantity on an activity with variants), {"no_variants"}
--   (items on one without), {"variant_keys"} (the items hash was not passed)
-- and on a part of a sharded activity, never "sold_out" nor "insufficient_stock", but:
--   {"borrow", claim_id, need}         this part has too few units: what it had is held by
--                                      a claim, and `need` more are to be borrowed from the
--                                      other parts (lend.lua), then settle.lua decides
--   {"in_progress"}                    this buyer's claim is younger than CLAIM_LEASE_MS:
--                                      another of their purchases is borrowing right now
--
-- Unlimited is the flag `unlimited`, never a value of a counter: a torn AOF replayed twice
-- once left a limited activity with `remaining -1` (what "unlimited" used to be stored as),
-- and it sold 502 of 500. So a counted activity's counters are checked on every purchase, at
-- O(1) from the same HMGET: total = remaining + held + sold, none negative (held is 0
-- unsharded); when they disagree nothing is sold until `seckill reconcile --repair` has made
-- them agree with the database.
--
-- The opening checks (rate, existence, kind, window on Redis's clock) are include/
-- sale_opening.lua, shared with grab.lua. The buyer check comes before the stock check so
-- that a winner repeating the purchase after the sale sold out still learns their order id.
--
-- Sharded invariants (each part, after every script): total = remaining + held + sold, all
-- >= 0; a user has at most one of {order, claim}, both on their home part only, so one
-- purchase per user holds across parts without any cross-part step. A claim older than the
-- lease is taken over by the buyer's next purchase (the units it holds come with it), so a
-- crashed gateway never locks a buyer out.

local CLAIM_LEASE_MS = 10000
local NO_WRITES = {}  -- a single item's: no variant counters
local sale_kind = 'stock'
local sale_fields = {'per_user_limit', 'remaining', 'shards', 'payment_window', 'unlimited',
  'total', 'sold', 'held', 'variants'}
-- The quantity, read once (tonumber is a strtod in Valkey's Lua). One variant, the common
-- purchase on an activity with variants: its items are this one match (already canonical),
-- and its counters are read in the same HMGET as the activity's fields (meta[13..15], before
-- `paused`), not in one more.
local qty = tonumber(ARGV[2])
local one_variant, one_item = nil, nil
if not qty then
  local vid, n = string.match(ARGV[2], '^([%w_-]+):([1-9]%d*)$')
  if vid then
    one_variant, one_item = 'v:' .. vid .. ':', {vid, tonumber(n)}
    sale_fields[10] = one_variant .. 'remaining'
    sale_fields[11] = one_variant .. 'sold'
    sale_fields[12] = one_variant .. 'total'
  end
end
-- @include sale_opening
-- @include variant_purchase
-- @include record_order
-- @include payment_hold
if not meta[8] then
  return {'unmigrated'}
end
local unlimited = meta[8] == '1'
local per_user_limit = tonumber(meta[4])
local remaining = tonumber(meta[5])
local shards = tonumber(meta[6] or 1)
if not unlimited then
  local total, sold, held_all = tonumber(meta[9]), tonumber(meta[10]), tonumber(meta[11] or 0)
  if not (remaining and total and sold and held_all) or remaining < 0 or sold < 0
      or held_all < 0 or remaining + held_all + sold ~= total then
    return {'inconsistent', meta[9] or '', meta[5] or '', meta[10] or '', meta[11] or '0'}
  end
end

-- A person's purchase: split at the '|' the plain find found (string.sub twice; a pattern
-- match cost the split about twice as much).
local uid, account = ARGV[1], nil
local bar = string.find(uid, '|', 1, true)
if bar then
  uid, account = string.sub(ARGV[1], 1, bar - 1), string.sub(ARGV[1], bar + 1)
end
local existing = redis.call('HGET', KEYS[2], uid)
if existing then
  return {'already_purchased', existing}
end
local hold, refusal = payment_hold(tonumber(meta[7]), (shards > 1 or meta[12]) and 5 or 4,
  #KEYS - (#ARGV - rate_argv_offset) / 2, uid, now_ms)
if refusal then
  return refusal
end

local items, encoded = nil, nil
if meta[12] then  -- variants: the items name what is bought
  if qty then
    return {'variant_required'}
  end
  if #KEYS - (#ARGV - rate_argv_offset) / 2 < 4 then
    return {'variant_keys'}
  end
  if one_item then
    items, qty, encoded = one_item, one_item[2], ARGV[2]
  else
    items, qty, encoded = variant_items(ARGV[2], per_user_limit)
    if not items then
      return encoded
    end
  end
elseif not qty and string.find(ARGV[2], ':', 1, true) then
  return {'no_variants'}
end
if not qty or qty < 1 or qty > per_user_limit or qty ~= math.floor(qty) then
  return {'bad_quantity', per_user_limit}
end

local held = 0
if shards > 1 and not unlimited then
  local claim = redis.call('HGET', KEYS[4], uid)
  if claim then
    local claim_ms, held_units = string.match(claim, '^(%d+):%d+|(%d+)$')
    if now_ms - tonumber(claim_ms) < CLAIM_LEASE_MS then
      return {'in_progress'}
    end
    held = tonumber(held_units)  -- a stale claim: taken over, with the units it holds
    redis.call('HDEL', KEYS[4], uid)
  end
  if remaining + held < qty then
    -- Too few here: hold what there is, and borrow the rest from the other parts.
    redis.call('HINCRBY', KEYS[1], 'remaining', -remaining)
    redis.call('HINCRBY', KEYS[1], 'held', remaining)
    held = held + remaining
    -- Unique across the parts (a donor keys its transfers by claim id): part j numbers its
    -- claims j+n, j+2n, ... as it numbers its orders. Two parts' first claims in the same
    -- millisecond once shared an id, and a donor's answer to one was taken by both.
    local part = tonumber(redis.call('HGET', KEYS[1], 'part') or 0)
    local claim_id = now_ms .. ':' .. (redis.call('HINCRBY', KEYS[1], 'claims', 1) * shards + part)
    redis.call('HSET', KEYS[4], uid, claim_id .. '|' .. held)
    return {'borrow', claim_id, qty - held}
  end
  if held > 0 then
    redis.call('HINCRBY', KEYS[1], 'held', -held)
  end
end

if unlimited then
  remaining = -1
else
  local writes = nil  -- with variants: their new counters, written with the activity's
  if items then
    local refused
    refused, writes = take_variants(items, remaining,
      one_variant and {meta[13], meta[14], meta[15], one_variant})
    if refused then
      return refused
    end
  end
  if remaining + held == 0 then
    return {'sold_out'}
  end
  if remaining + held < qty then
    return {'insufficient_stock', remaining}
  end
  if shards == 1 then
    -- Every counter in one write, after every check: read by this same script's HMGET,
    -- nothing ran between (an HINCRBY per counter was a command each, each in the AOF).
    redis.call('HSET', KEYS[1], 'remaining', remaining - qty, 'sold', tonumber(meta[10]) + qty,
      unpack(writes or NO_WRITES))
    remaining = remaining - qty
  else  -- a part of a sharded activity: what a claim held comes back first
    remaining = redis.call('HINCRBY', KEYS[1], 'remaining', held - qty)
  end
end

local order_id = record_order(uid, qty, ARGV[3], now_ms, shards, hold, account, encoded,
  not unlimited and shards == 1)
if hold then
  return {'ok', order_id, remaining, hold[3]}
end
return {'ok', order_id, remaining}
