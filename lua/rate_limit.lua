-- rate_limit.lua: the per-user rate limit on its own, for GET /seckill/url (the purchase
-- counts its limit inside the purchase script). Fixed windows, one counter per rate.
--
-- KEYS[i]  the counter of rate i, seckill:{<user>}:rate:<endpoint>:<user>:<window ms>
--          (the user's hash tag: one slot)
-- ARGV     limit_1, window_ms_1, limit_2, window_ms_2, ...
-- Returns {"ok"}, or {"rate_limited", ms until the full counter resets}.

-- @include rate_limit

return rate_limited(0) or {'ok'}
