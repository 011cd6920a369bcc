-- queue_join.lua: a user joins a `queue` or `draw` activity's queue. KEYS as in
-- include/queue_view.lua. ARGV[1] user id, ARGV[2] an admission's life (ms), ARGV[3] the
-- user's rank among the joiners before the start (decimal, < 2^52: SHA-256(seed:user),
-- seckill/domain/admission.py). ARGV[4] "" or, on a `limit_by: person` activity (ARGV[1] is
-- then the person's key), the account joining for the person: KEYS[7] (:joined, person key
-- -> account) keeps the first, and the person's other accounts are refused {"already_joined"}
-- (one place, one entry per person).
--
-- Before the start a joiner is placed by their rank: the pre-queue is in that order when the
-- sale starts, whoever joined first or most often. After it: a `queue` puts them at the back
-- (2^52 + arrival number; doubles hold these exactly), a `draw` takes no more entries.
-- Joining again keeps the place. Returns the view of include/queue_view.lua, or a refusal:
-- {"not_open", queue_opens_ms} {"ended"} {"sold_out"} {"entries_closed"}
-- {"already_purchased", order id} {"hold_expired", order id} {"already_joined"}
-- {"uninitialized"} {"first_come"}

-- @include sale_window
-- @include queue_view

local LATE_BASE = 4503599627370496  -- 2^52

local q, refused = queue_state()
if refused then
  return refused
end
local now_ms = q.now_ms
local user = ARGV[1]
if now_ms < q.opens_ms then
  return {'not_open', q.opens_ms}
end
if now_ms >= q.ends_ms then
  return {'ended'}
end
local order_id = redis.call('HGET', KEYS[2], user)
if order_id then
  return {'already_purchased', order_id}
end
local expired = redis.call('HGET', KEYS[6], user)
if expired then
  return {'hold_expired', expired}
end
local account = ARGV[4]
if account and account ~= '' then
  local first = redis.call('HGET', KEYS[7], user)
  if first and first ~= account then
    return {'already_joined'}
  end
end
advance(q, tonumber(ARGV[2]))
if not redis.call('ZSCORE', KEYS[3], user) and not redis.call('ZSCORE', KEYS[4], user) then
  if now_ms < q.starts_ms then
    redis.call('ZADD', KEYS[3], ARGV[3], user)
  elseif q.admission == 'draw' then
    return {'entries_closed'}
  elseif q.remaining == 0 then
    return {'sold_out'}
  else
    local arrival = redis.call('HINCRBY', KEYS[1], 'queue_seq', 1)
    redis.call('ZADD', KEYS[3], string.format('%.0f', LATE_BASE + arrival), user)
  end
  redis.call('HDEL', KEYS[5], user)
  if account and account ~= '' then
    redis.call('HSET', KEYS[7], user, account)
  end
  advance(q, tonumber(ARGV[2]))
end
return view(q, user, account)
