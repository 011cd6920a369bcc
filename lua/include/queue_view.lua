-- queue_view.lua (included by queue_join.lua and queue_status.lua, with include/sale_window):
-- the queue of a `queue` or `draw` activity moves forward, then says where one user stands.
-- Every call of either script does this first, so the queue advances whenever anyone asks; no
-- process runs a timer.
--
-- queue_state() -> q, nil: the activity's queue fields by name (starts_ms, ends_ms, unlimited,
--   remaining (-1: unlimited), admission, factor, opens_ms, paused) and now_ms, Redis's time;
--   or nil, the refusal: {"uninitialized"} (Redis lost the activity) or {"first_come"} (no
--   queue here)
-- advance(q, ttl_ms): inside the window and not paused, lapsed admissions end and the front
--   of the queue is admitted, each admission for ttl_ms
-- view(q, user, account) -> the answer both scripts give (below)
--
-- KEYS[1] :meta      starts_ms, ends_ms, remaining, admission, admission_factor,
--                    admitted_total, queue_opens_ms, unlimited ("1": unlimited stock; only
--                    this flag says so, never a counter: see purchase.lua)
-- KEYS[2] :buyers    user -> order id (the purchase script's)
-- KEYS[3] :queue     sorted set: the waiting users, by place (lowest first): before the start
--                    the 52-bit rank SHA-256(seed:user) gives (seckill/domain/admission.py),
--                    after it 2^52 + the arrival number
-- KEYS[4] :admitted  sorted set: the admitted users, by when their admission lapses (ms)
-- KEYS[5] :lapsed    hash: user -> when their admission lapsed unused
-- KEYS[6] :expired   hash (a payment window's): user -> their order that expired unpaid
-- KEYS[7] :joined    hash (a person-limited activity's): person key -> the account that
--                    joined for them (queue_join.lua)
-- A "user" here is a buyer: on a `limit_by: person` activity, the person's key.
--
-- Invariant (after every call, with one unit per buyer): admitted users who have not bought
-- <= floor(remaining x admission_factor). admit() only fills the room below that bound; a
-- purchase lowers `remaining` by one and the buyer's admission still counts until it leaves
-- `admitted` (the gateway removes it after the 200, a status call or its lapse does), so the
-- count of the unbought ones drops with it.

-- Users admitted or lapsed per call at most: a call stays short.
local function queue_max_step()
  return 1000
end

local function queue_state()
  local starts_ms, ends_ms, remaining, admission, factor, _, opens_ms, paused, unlimited =
    unpack(redis.call('HMGET', KEYS[1], 'starts_ms', 'ends_ms', 'remaining', 'admission',
      'admission_factor', 'admitted_total', 'queue_opens_ms', 'paused', 'unlimited'))
  if not starts_ms then
    return nil, {'uninitialized'}
  end
  admission = admission or 'first_come'
  if admission == 'first_come' then
    return nil, {'first_come'}
  end
  unlimited = unlimited == '1'
  return {
    starts_ms = tonumber(starts_ms), ends_ms = tonumber(ends_ms), unlimited = unlimited,
    remaining = unlimited and -1 or tonumber(remaining), admission = admission,
    factor = tonumber(factor or '1'), opens_ms = tonumber(opens_ms or '0'),
    -- A paused sale admits no one (the admitted could not buy); the queue keeps its order.
    paused = paused == '1', now_ms = redis_now_ms(),
  }, nil
end

-- Admissions that ran out: gone from `admitted`; unused ones are remembered as lapsed.
local function lapse(q)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', q.now_ms, 'LIMIT', 0,
    queue_max_step())
  for _, user in ipairs(gone) do
    redis.call('ZREM', KEYS[4], user)
    if redis.call('HEXISTS', KEYS[2], user) == 0 then
      redis.call('HSET', KEYS[5], user, q.now_ms)
    end
  end
end

-- Admit from the front of the queue into the room the units left make.
local function admit(q, ttl_ms)
  local room
  if q.unlimited then
    room = queue_max_step()
  else
    room = math.min(queue_max_step(),
      math.floor(q.remaining * q.factor) - redis.call('ZCARD', KEYS[4]))
  end
  if room <= 0 then
    return
  end
  local front = redis.call('ZPOPMIN', KEYS[3], room)
  local admitted = 0
  -- Ends on a whole second, at least ttl_ms from now: the purchase URL, which counts whole
  -- seconds and never outlives the admission, then lasts all of it (rounded down, a 1 s
  -- admission given at .95 would leave its buyer 50 ms).
  local ends = math.ceil((q.now_ms + ttl_ms) / 1000) * 1000
  for i = 1, #front, 2 do
    local user = front[i]
    if redis.call('HEXISTS', KEYS[2], user) == 0 then
      redis.call('ZADD', KEYS[4], ends, user)
      admitted = admitted + 1
    end
  end
  if admitted > 0 then
    redis.call('HINCRBY', KEYS[1], 'admitted_total', admitted)
  end
end

local function advance(q, ttl_ms)
  if q.now_ms >= q.starts_ms and q.now_ms < q.ends_ms and not q.paused then
    lapse(q)
    admit(q, ttl_ms)
  end
end

-- {status, position, admitted until ms, waiting, admitted, remaining, now ms, starts ms,
--  admitted in all, order id, lapsed ms}; position 0 when none. `account` ("" unless the
-- activity is limited by person, `user` then the person's key): the account asking. The
-- person's place is the account's that joined (KEYS[7]); their other accounts hold none
-- (only the order, once there is one, is the person's whichever account asks).
local function view(q, user, account)
  local now_ms, starts_ms, remaining = q.now_ms, q.starts_ms, q.remaining
  local waiting, admitted = redis.call('ZCARD', KEYS[3]), redis.call('ZCARD', KEYS[4])
  local total = tonumber(redis.call('HGET', KEYS[1], 'admitted_total') or '0')
  local function answer(status, position, until_ms, order_id, lapsed_ms)
    -- A counted activity's remaining that reads negative (inconsistent: its purchases are
    -- refused) is shown as none left, never as -1, which the gateway reads as unlimited.
    local shown = q.unlimited and -1 or math.max(remaining, 0)
    return {status, position or 0, until_ms or 0, waiting, admitted, shown, now_ms,
            starts_ms, total, order_id or '', lapsed_ms or 0}
  end
  if user == '' then
    return answer('state')
  end
  local order_id = redis.call('HGET', KEYS[2], user)
  if order_id then
    if redis.call('ZREM', KEYS[4], user) == 1 then
      admitted = admitted - 1
    end
    return answer('purchased', 0, 0, order_id)
  end
  if now_ms >= q.ends_ms then
    return answer('ended')
  end
  local sold_out = now_ms >= starts_ms and remaining == 0
  if account and account ~= '' then
    local holder = redis.call('HGET', KEYS[7], user)
    if holder and holder ~= account then
      return answer(sold_out and 'sold_out' or 'none')
    end
  end
  local until_ms = redis.call('ZSCORE', KEYS[4], user)
  if until_ms then
    return answer(sold_out and 'sold_out' or 'admitted', 0, tonumber(until_ms))
  end
  local place = redis.call('ZRANK', KEYS[3], user)
  if place then
    if now_ms < starts_ms then
      return answer('waiting')
    end
    if sold_out then
      return answer('sold_out', place + 1)
    end
    return answer(q.admission == 'draw' and 'not_drawn' or 'waiting', place + 1)
  end
  if sold_out then
    return answer('sold_out')
  end
  return answer('none', 0, 0, nil, tonumber(redis.call('HGET', KEYS[5], user) or '0'))
end
