-- lend.lua: one part of a sharded activity lends units to a buyer's claim on another part
-- (the buyer's home part, which answered {"borrow", claim_id, need}: see purchase.lua).
--
-- KEYS[1]  seckill:{<donor tag>}:meta       hash: total, remaining, lent, held, sold
-- KEYS[2]  seckill:{<donor tag>}:transfers  hash: claim id -> "<units>|<home tag>|<user>"
-- ARGV[1]  claim id   ARGV[2] units still needed   ARGV[3] home tag (data)   ARGV[4] user id
--
-- Claim ids are unique across the activity's parts (purchase.lua numbers part j's claims
-- j+n, j+2n, ...): a repeat here is the same claim's, never another part's.
--
-- Returns {"lent", units, remaining}: units may be 0 (this part has none to lend); a repeat
-- for the same claim answers what was lent the first time and lends nothing more.
-- {"uninitialized"}: Redis lost this part. {"inconsistent", total, remaining, held, sold}:
-- this part's counters disagree (total = remaining + held + sold, none negative: purchase.lua
-- checks the same): it lends nothing until `seckill reconcile --repair` has mended it.
--
-- The lent units leave this part's total (total = remaining + held + sold still holds here)
-- and are in transit until the home part receives them (settle.lua, or receive.lua when
-- `seckill reconcile --repair` delivers a transfer whose gateway died): the transfer record
-- stays, so a unit in transit is never lost, and the home part counts each claim's units
-- once (its `received` hash), so none is counted twice. Activity total = sum of the parts'
-- totals + sum(lent) - sum(borrowed).

local remaining_s, total_s, held_s, sold_s = unpack(redis.call('HMGET', KEYS[1], 'remaining',
  'total', 'held', 'sold'))
if not remaining_s then
  return {'uninitialized'}
end
local remaining = tonumber(remaining_s)
local total, held, sold = tonumber(total_s), tonumber(held_s or 0), tonumber(sold_s or 0)
if not total or remaining < 0 or held < 0 or sold < 0 or remaining + held + sold ~= total then
  -- As read (strings), so the operator sees what Redis holds.
  return {'inconsistent', total_s or '', remaining_s, held_s or '0', sold_s or '0'}
end
local done = redis.call('HGET', KEYS[2], ARGV[1])
if done then
  return {'lent', tonumber(string.match(done, '^(%d+)')), remaining}
end
local take = math.min(tonumber(ARGV[2]), remaining)
if take <= 0 then
  return {'lent', 0, remaining}
end
redis.call('HINCRBY', KEYS[1], 'total', -take)
redis.call('HINCRBY', KEYS[1], 'lent', take)
remaining = redis.call('HINCRBY', KEYS[1], 'remaining', -take)
redis.call('HSET', KEYS[2], ARGV[1], take .. '|' .. ARGV[3] .. '|' .. ARGV[4])
return {'lent', take, remaining}
