-- lever_recorded.lua: the database has caught up with an activity's levers: forget that it
-- had to, unless a lever came meanwhile (its own mark, a new token, stays for the next pass).
--
-- KEYS[1]  seckill:levers:pending   hash: activity id -> token of the latest lever's mark
-- ARGV[1]  activity id   ARGV[2] the token the caller saw before it wrote the database
--
-- Returns 1 if forgotten, 0 if a newer mark stands.

if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
