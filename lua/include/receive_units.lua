-- receive_units.lua (included by settle.lua and receive.lua): a home part takes in the units
-- one donor part lent to one claim, exactly once. KEYS[1] is the part's meta; `received` its
-- hash of "<claim id>@<donor part>" -> units: keyed by donor too, as one claim may borrow
-- from several parts (keyed by claim alone, a second donor's delivery by `seckill reconcile`
-- was taken for a repeat and its units vanished). Returns whether the units were added now
-- (false: already received).

local function receive_units(received, claim_id, donor, units)
  if units <= 0 or redis.call('HSETNX', received, claim_id .. '@' .. donor, units) == 0 then
    return false
  end
  redis.call('HINCRBY', KEYS[1], 'total', units)
  redis.call('HINCRBY', KEYS[1], 'borrowed', units)
  redis.call('HINCRBY', KEYS[1], 'remaining', units)
  return true
end
