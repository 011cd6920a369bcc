-- migrate_unlimited.lua: give a meta hash written before the `unlimited` flag its flag, as the
-- database says (seckill/store/sale/activity/recovery.py, Restorer.migrate). Before the flag,
-- `remaining -1` (and `total -1`) meant unlimited; a script cannot tell that from a limited
-- activity whose counter a torn AOF replay left at -1, so the gateway asks the database (total
-- NULL: unlimited) and writes the answer here.
--
-- Kept: a shop's Redis keeps its meta hashes across upgrades (AOF, RDB, a restored backup), so
-- one written by a gateway from before the flag can still be there; only the database knows
-- what its `remaining -1` means, and the sale scripts answer {"unmigrated"} until this ran.
--
-- KEYS[1]  seckill:{<tag>}:meta   ARGV[1] "1" (unlimited) or "0" (counted)
--
-- Returns 1 when the flag was written, 0 when the hash is missing (never created here: a
-- lone flag would pass for an activity) or already has a flag (never changed here).

if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'unlimited') == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'unlimited', ARGV[1])
return 1
