-- sale_opening.lua (included by purchase.lua and grab.lua): what a sale script checks first,
-- in this order, answering at once on any of them:
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
-- The includer also includes sale_window and rate_limit; ARGV[1..4] are its own (user,
-- quantity, activity id, deadline), the rates follow.
--
-- sale_admits(now_ms) -> nil, or the refusal of steps 0 and 1 (before the meta hash is read)
-- sale_closed(sale_kind, starts_ms, ends_ms, kind, paused, now_ms) -> nil, or the refusal of
--   steps 2 to 5: the meta hash's fields as HMGET read them (false when absent); `sale_kind`
--   "stock" or "packets", the script's.

local function sale_admits(now_ms)
  local deadline_ms = tonumber(ARGV[4]) or 0
  if deadline_ms > 0 and now_ms > deadline_ms then
    return {'expired', now_ms - deadline_ms}
  end
  return rate_limited(4)
end

local function sale_closed(sale_kind, starts_ms, ends_ms, kind, paused, now_ms)
  if not starts_ms then
    return {'uninitialized'}
  end
  if (kind or 'stock') ~= sale_kind then
    return {'wrong_kind', kind or 'stock'}
  end
  local closed = outside_window(tonumber(starts_ms), tonumber(ends_ms), now_ms)
  if closed then
    return closed
  end
  if paused == '1' then
    return {'paused'}
  end
  return nil
end
