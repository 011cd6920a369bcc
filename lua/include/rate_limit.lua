-- rate_limit.lua: the per-user rate limit, counted inside the caller's own round trip (the
-- purchase and grab scripts, through include/sale_opening.lua, and the standalone
-- rate_limit.lua).
--
-- rate_limited(argv_offset) -> nil, or {"rate_limited", ms until the full counter resets}
--   `argv_offset`: the number of the script's own ARGV. The rates are SECKILL_USER_RATE's
--   fixed windows, passed after those (offset 4: ARGV[5], ARGV[6] limit and window (ms) of the
--   first rate; ARGV[7], ARGV[8] the next ...), and their counters are the last KEYS, one per
--   rate, built by the gateway (seckill/store/plumbing/keys.py, KeySpace.rate):
--     seckill:{<tag>}:rate:<endpoint>:<user>:<window ms>
--   (a purchase's under its activity's or part's tag, so its script can count them). A retry
--   of the same attempt (after a rebuild) passes no rate and is not counted twice.

local function rate_limited(argv_offset)
  local rates = (#ARGV - argv_offset) / 2
  local first = #KEYS - rates
  for i = 1, rates do
    local key = KEYS[first + i]
    local count = redis.call('INCR', key)
    if count == 1 then
      redis.call('PEXPIRE', key, ARGV[argv_offset + 2 * i])
    end
    if count > tonumber(ARGV[argv_offset - 1 + 2 * i]) then
      return {'rate_limited', redis.call('PTTL', key)}
    end
  end
  return nil
end
