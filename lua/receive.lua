-- receive.lua: deliver a transfer whose gateway died between lend.lua and settle.lua to its
-- home part (`seckill reconcile --repair`, for transfers older than settle.lua's limit).
-- Exactly once: a claim's units are counted by the home part once, whoever delivers them.
--
-- KEYS[1]  seckill:{<home tag>}:meta
-- KEYS[2]  seckill:{<home tag>}:received   hash: "<claim id>@<donor part>" -> units
-- ARGV[1]  claim id   ARGV[2] units   ARGV[3] the donor's part number
--
-- Returns {"delivered"}, {"already"} (settled or delivered before), or {"uninitialized"}.

-- @include receive_units

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'uninitialized'}
end
if receive_units(KEYS[2], ARGV[1], ARGV[3], tonumber(ARGV[2])) then
  return {'delivered'}
end
return {'already'}
