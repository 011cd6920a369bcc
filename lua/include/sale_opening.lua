-- sale_opening.lua (included at the top of purchase.lua and grab.lua): what a sale script
-- checks first, in this order, returning at once on any of them:
--   0. the request's decision deadline (ARGV[4], epoch ms on Redis's clock; 0: none) has not
--      passed                                           {"expired", ms past it}
--   1. the per-user rate (include/rate_limit.lua)        {"rate_limited", ms}
--   2. the activity exists                               {"uninitialized"}: Redis lost it
--   3. it is of the script's kind                        {"wrong_kind", kind}
--   4. the window, on Redis's clock (include/sale_window.lua)
--                                                        {"not_started", starts_ms, now_ms}
--                                                        or {"ended"}
--   5. the operator has not paused the sale              {"paused"}
--
-- The deadline comes first, before the rate is counted: a request whose buyer may already have
-- been told it failed (nginx gave up on it) changes nothing at all, so "none" stays true.
--
-- Before the include the script sets `sale_kind` ("stock" or "packets") and `sale_fields`,
-- the meta fields it reads besides these. After it, `meta` holds starts_ms, ends_ms, kind,
-- then `sale_fields` in order, and `now_ms` is Redis's time in milliseconds. KEYS[1] is the
-- meta hash; ARGV[1..4] are the script's own (user, quantity, activity id, deadline).

local rate_argv_offset = 4
-- @include sale_window
local now_ms = redis_now_ms()
local deadline_ms = tonumber(ARGV[4]) or 0
if deadline_ms > 0 and now_ms > deadline_ms then
  return {'expired', now_ms - deadline_ms}
end
-- @include rate_limit

-- The pause is read in the same HMGET, last (after the script's own fields).
local meta_fields = {'starts_ms', 'ends_ms', 'kind', unpack(sale_fields)}
local paused_at = #meta_fields + 1
meta_fields[paused_at] = 'paused'
local meta = redis.call('HMGET', KEYS[1], unpack(meta_fields))
if not meta[1] then
  return {'uninitialized'}
end
if (meta[3] or 'stock') ~= sale_kind then
  return {'wrong_kind', meta[3] or 'stock'}
end
local closed = outside_window(tonumber(meta[1]), tonumber(meta[2]), now_ms)
if closed then
  return closed
end
if meta[paused_at] == '1' then
  return {'paused'}
end
