-- confirm.lua: the orders worker's last step for a stored batch of one activity, in one atomic
-- step: mark the stored orders confirmed ("|c" suffix on the buyer's entry, only where the
-- entry still names that order: a cancelled or replaced order is left alone), then
-- acknowledge the batch's stream entries. Together or not at all: a crash (of the worker, of
-- the connection, of the server) can leave the entries pending, to be stored again and
-- confirmed then, but never acknowledged with the mark missing. With no entry ids it only
-- marks (``seckill reconcile --repair``).
--
-- KEYS[1]  seckill:{<aid>}:buyers   hash: user id -> order id
-- KEYS[2]  seckill:{<aid>}:orders   stream
-- ARGV[1]  the consumer group
-- ARGV[2]  n, the number of entry ids that follow
-- ARGV[3 .. 2+n]      entry ids to acknowledge
-- ARGV[3+n .. ]       user id, order id, user id, order id, ...
--
-- Returns {marked, acknowledged}.

local n = tonumber(ARGV[2])
local marked = 0
for i = 3 + n, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1] .. '|c')
    marked = marked + 1
  end
end
local acked = 0
local step = 1000  -- unpack() is bounded by Lua's stack: acknowledge in slices
for first = 3, 2 + n, step do
  local last = math.min(first + step - 1, 2 + n)
  acked = acked + redis.call('XACK', KEYS[2], ARGV[1], unpack(ARGV, first, last))
end
return {marked, acked}
