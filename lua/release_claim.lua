-- release_claim.lua: give a stale claim's held units back to its part's stock (`seckill
-- reconcile --repair`; a buyer's own next purchase takes a stale claim over instead).
--
-- KEYS[1]  seckill:{<tag>}:meta   KEYS[2] seckill:{<tag>}:claims
-- ARGV[1]  user id   ARGV[2] the claim's value as the caller read it ("<claim id>|<held>")
--
-- Returns {"released", units}, or {"changed"} when the claim is no longer that one.

if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return {'changed'}
end
local held = tonumber(string.match(ARGV[2], '|(%d+)$'))
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'held', -held)
redis.call('HINCRBY', KEYS[1], 'remaining', held)
return {'released', held}
