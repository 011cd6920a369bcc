-- create_activity.lua: write a new activity's meta hash, stock included, only if absent.
--
-- KEYS[1]  seckill:{<aid>}:meta
-- ARGV     field, value, field, value, ... (starts_ms, ends_ms, total, remaining,
--          per_user_limit, kind, name, seq, created_ms)
--
-- Returns 1 when created, 0 when the activity already exists (nothing is changed).
-- Creating and warming the stock in one step means stock is in Redis before the sale opens,
-- and no purchase can ever see a half-written activity.

if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
