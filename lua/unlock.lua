-- unlock.lua: release a lock taken with SET key token NX PX ttl, only if we still hold it.
--
-- KEYS[1]  the lock key     ARGV[1]  the token written when it was taken
--
-- Returns 1 if released, 0 if the lock had expired or belongs to someone else now.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
