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
-- store/plumbing/parts.py); a sharded purchase always runs on the buyer's home part.
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
-- Unlimited is the flag `unlimited`, never a value of a counter (docs/failure-behaviour.md,
-- "Counters that disagree stop the sale", says why). A counted activity's counters are checked on
-- every purchase, at O(1) from the same HMGET: total = remaining + held + sold, none negative
-- (held is 0 unsharded); when they disagree nothing is sold until `seckill reconcile
-- --repair` has made them agree with the database.
--
-- The opening checks (deadline, rate, existence, kind, window on Redis's clock, pause) are
-- include/sale_opening.lua's, shared with grab.lua. The buyer check comes before the stock check
-- so that a winner repeating the purchase after the sale sold out still learns their order id.
--
-- Sharded invariants (each part, after every script): total = remaining + held + sold, all
-- >= 0; a user has at most one of {order, claim}, both on their home part only, so one
-- purchase per user holds across parts without any cross-part step. A claim older than the
-- lease is taken over by the buyer's next purchase (the units it holds come with it), so a
-- crashed gateway never locks a buyer out.

local CLAIM_LEASE_MS = 10000
local NO_WRITES = {}  -- a single item's: no variant counters
local NO_FIELDS = {}  -- likewise: no variant fields read
-- @include sale_window
-- @include rate_limit
-- @include sale_opening
-- @include variant_purchase
-- @include record_order
-- @include payment_hold

local now_ms = redis_now_ms()
local refused = sale_admits(now_ms)
if refused then
  return refused
end

-- The quantity, read once (tonumber is a strtod in Valkey's Lua). One variant, the common
-- purchase on an activity with variants: its items are this one match (already canonical),
-- and its counters are read in the same HMGET as the activity's fields, not in one more.
local qty = tonumber(ARGV[2])
local one_variant, one_item, variant_fields = nil, nil, NO_FIELDS
if not qty then
  local vid, n = string.match(ARGV[2], '^([%w_-]+):([1-9]%d*)$')
  if vid then
    one_variant, one_item = 'v:' .. vid .. ':', {vid, tonumber(n)}
    variant_fields = {one_variant .. 'remaining', one_variant .. 'sold', one_variant .. 'total'}
  end
end

-- The activity's fields, read once, by name: as HMGET gives them, strings or false (absent).
local starts_ms, ends_ms, kind, paused, per_user_limit, remaining, shards, payment_window,
    unlimited_flag, total, sold, held_all, variants, v_remaining, v_sold, v_total =
  unpack(redis.call('HMGET', KEYS[1], 'starts_ms', 'ends_ms', 'kind', 'paused',
    'per_user_limit', 'remaining', 'shards', 'payment_window', 'unlimited', 'total', 'sold',
    'held', 'variants', unpack(variant_fields)))
refused = sale_closed('stock', starts_ms, ends_ms, kind, paused, now_ms)
if refused then
  return refused
end
if not unlimited_flag then
  return {'unmigrated'}
end
local unlimited = unlimited_flag == '1'
per_user_limit = tonumber(per_user_limit)
shards = tonumber(shards or 1)
local left = tonumber(remaining)
if not unlimited then
  local total_n, sold_n, held_n = tonumber(total), tonumber(sold), tonumber(held_all or 0)
  if not (left and total_n and sold_n and held_n) or left < 0 or sold_n < 0 or held_n < 0
      or left + held_n + sold_n ~= total_n then
    return {'inconsistent', total or '', remaining or '', sold or '', held_all or '0'}
  end
end
remaining = left

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
-- The script's last key before the rate counters.
local last_key = #KEYS - (#ARGV - 4) / 2
local hold, refusal = payment_hold(tonumber(payment_window), (shards > 1 or variants) and 5 or 4,
  last_key, uid, now_ms)
if refusal then
  return refusal
end

local items, encoded = nil, nil
if variants then  -- the items name what is bought
  if qty then
    return {'variant_required'}
  end
  if last_key < 4 then
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
    -- claims j+n, j+2n, ... as it numbers its orders, so two parts' first claims in the same
    -- millisecond never share an id.
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
    refused, writes = take_variants(items, remaining, one_variant, v_remaining, v_sold, v_total)
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
    redis.call('HSET', KEYS[1], 'remaining', remaining - qty, 'sold', tonumber(sold) + qty,
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
