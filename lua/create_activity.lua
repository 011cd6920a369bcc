-- create_activity.lua: write a new activity's meta hash, stock included, only if absent.
--
-- KEYS[1]  seckill:{<aid>}:meta
-- KEYS[2]  (packets only) seckill:{<aid>}:packets-staging:<token>  the pre-split packets,
--          pushed in chunks before this call
-- KEYS[3]  (packets only) seckill:{<aid>}:packets                  where they are sold from
-- ARGV     field, value, field, value, ... (starts_ms, ends_ms, unlimited ("1": unlimited
--          stock, its total and remaining then -1 and never read; "0": counted), total,
--          remaining, per_user_limit, kind, name, seq, created_ms; amount, amount_given for
--          packets)
--
-- Returns 1 when created, 0 when the activity already exists (nothing is changed, and the
-- staging list is dropped), -1 when the staging list does not hold exactly `remaining`
-- packets (a push cut short, or expired): nothing is created, the staging list is dropped.
-- Creating and warming the stock in one step means stock is in Redis before the sale opens,
-- and no purchase can ever see a half-written activity. Packets are pushed to a staging key
-- first and renamed here: a creation and a rebuild racing each other (or two rebuilds) can
-- never both fill the list, so no packet is ever in it twice.

if redis.call('EXISTS', KEYS[1]) == 1 then
  if KEYS[2] then
    redis.call('DEL', KEYS[2])
  end
  return 0
end
if KEYS[2] then
  local expected = nil
  for i = 1, #ARGV - 1, 2 do
    if ARGV[i] == 'remaining' then
      expected = tonumber(ARGV[i + 1])
    end
  end
  if redis.call('LLEN', KEYS[2]) ~= expected then
    redis.call('DEL', KEYS[2])
    return -1
  end
  if expected > 0 then
    redis.call('RENAME', KEYS[2], KEYS[3])
    redis.call('PERSIST', KEYS[3])
  else
    redis.call('DEL', KEYS[3])  -- every packet is claimed (a rebuild): an empty list
  end
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
