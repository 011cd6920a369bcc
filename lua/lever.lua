-- lever.lua: an operator's lever (pause, resume, end) on one part of an activity, or the stamp
-- of a restock already applied. The sale scripts read `paused` and `ends_ms` here, so a lever
-- is in force the moment this runs; the database follows it
-- (seckill/store/sale/activity/controls.py).
--
-- KEYS[1]  seckill:{<tag>}:meta   the activity's own (part 0), or one of its parts
-- ARGV[1]  the field: "paused", "ends_ms" or "total"
-- ARGV[2]  paused: "1" or "0"; ends_ms: unused (the end is now, on Redis's clock, never later
--          than the current end); total: unused (a restock already changed it: only stamped)
-- ARGV[3]  the lever's version: paused and ends_ms, the moment the operator's request arrived
--          (epoch ms x 1000, so that the later request wins however late it is run); total,
--          "" (the next version is taken here, after every earlier restock's)
--
-- Each field keeps the version of the lever that set it (`<field>_v`); a lever whose version
-- is older than the field's changes nothing here and answers {"superseded", version}: the
-- operator's later command stands. The database is written with the same version, and only
-- where it is newer (seckill/sql/book.py), so nothing is ever reversed.
--
-- Returns {"ok", version, value}: value as it now is (paused "1"/"0", ends_ms, the total)
--         {"superseded", version, value}: a later lever set the field; value is its
--         {"ended", ends_ms}: end of a part whose window is already over (nothing changed)
--         {"uninitialized"}: the meta hash is missing (Redis lost the activity)

local field = ARGV[1]
local ends_ms, current, stored_v = unpack(redis.call('HMGET', KEYS[1], 'ends_ms', field,
  field .. '_v'))
if not ends_ms then
  return {'uninitialized'}
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
stored_v = tonumber(stored_v or 0)
local version = tonumber(ARGV[3])
if field == 'total' then
  -- One restock after another here: each version above the last and the clock's microsecond.
  version = math.max(stored_v + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('HSET', KEYS[1], 'total_v', version)
  return {'ok', version, current}
end
if stored_v > version then
  return {'superseded', stored_v, current or ''}
end
local value = ARGV[2]
if field == 'ends_ms' then
  ends_ms = tonumber(ends_ms)
  if ends_ms <= now_ms then
    return {'ended', ends_ms}
  end
  value = math.min(ends_ms, now_ms)
end
redis.call('HSET', KEYS[1], field, value, field .. '_v', version)
return {'ok', version, tostring(value)}
