-- rate_limit.lua (included by purchase.lua and grab.lua at their top, and by the standalone
-- rate_limit.lua): the per-user rate limit, counted inside the purchase's own round trip.
--
-- The including script first sets `rate_argv_offset`, the number of its own ARGV. The rates
-- are SECKILL_USER_RATE's fixed windows, passed after those (offset 3: ARGV[4], ARGV[5] limit
-- and window (ms) of the first rate; ARGV[6], ARGV[7] the next ...), and their counters are
-- the last KEYS, one per rate, built by the gateway, for purchases as
--   seckill:{<aid>}:rate:<user>:<window ms>
-- A retry of the same attempt (after a rebuild) passes no rate and is not counted twice.
-- Over a limit, nothing else runs and the script answers {"rate_limited", ms until reset}.

local function over_rate_limit()
  local rates = (#ARGV - rate_argv_offset) / 2
  local first = #KEYS - rates
  for i = 1, rates do
    local key = KEYS[first + i]
    local count = redis.call('INCR', key)
    if count == 1 then
      redis.call('PEXPIRE', key, ARGV[rate_argv_offset + 2 * i])
    end
    if count > tonumber(ARGV[rate_argv_offset - 1 + 2 * i]) then
      return redis.call('PTTL', key)
    end
  end
  return nil
end

local rate_limited_for = over_rate_limit()
if rate_limited_for then
  return {'rate_limited', rate_limited_for}
end
