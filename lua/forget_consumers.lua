-- forget_consumers.lua: remove the consumers of a stream's group that are gone: silent for at
-- least the bound and holding no pending entry (a dead worker's entries are first reclaimed
-- by a live one). Atomic, so no consumer can read an entry between the check and the
-- deletion: XGROUP DELCONSUMER would drop that entry from the group's pending list and the
-- order would never be stored. A live consumer that was wrongly thought silent only loses its
-- name, which its next XREADGROUP creates again.
--
-- KEYS[1]  seckill:{<aid>}:orders   stream
-- ARGV[1]  the consumer group
-- ARGV[2]  the bound: milliseconds since the consumer's last read or claim
-- ARGV[3]  a consumer never removed (the caller itself), or ""
-- ARGV[4]  if not "": only this consumer is considered
--
-- Returns the names removed.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {}
end
local consumers = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if consumers['err'] then
  return {}  -- no such group (yet, or any more)
end
local bound = tonumber(ARGV[2])
local removed = {}
for _, consumer in ipairs(consumers) do
  local info = {}
  for i = 1, #consumer, 2 do
    info[consumer[i]] = consumer[i + 1]
  end
  local name = info['name']
  if name ~= ARGV[3] and (ARGV[4] == '' or name == ARGV[4])
      and tonumber(info['pending']) == 0 and tonumber(info['idle']) >= bound then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
    removed[#removed + 1] = name
  end
end
return removed
