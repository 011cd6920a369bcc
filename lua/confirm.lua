-- confirm.lua: mark orders as stored in the database ("|c" suffix on the buyer's entry),
-- only where the entry still names that order (a cancelled or replaced order is left alone).
--
-- KEYS[1]  seckill:{<aid>}:buyers   hash: user id -> order id
-- ARGV     user id, order id, user id, order id, ...
--
-- Returns the number of entries marked.

local marked = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1] .. '|c')
    marked = marked + 1
  end
end
return marked
