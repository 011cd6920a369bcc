-- queue_status.lua: where a user stands in a `queue` or `draw` activity's queue (ARGV[1] a
-- user id), or the queue as a whole (ARGV[1] ""), after moving it forward: one round trip
-- for a poll. KEYS as in include/queue_view.lua. ARGV[2] an admission's life, ms (the
-- purchase URL's). ARGV[3] "forget": sent right after the user's purchase, in the same send:
-- if they did buy (they are in `buyers`), their admission ends now and the next user is
-- admitted in this step; if the purchase was refused, nothing changes. ARGV[4] (optional)
-- on a `limit_by: person` activity, ARGV[1] being the person's key: the account asking (see
-- view() in include/queue_view.lua).
--
-- Returns the view of include/queue_view.lua, or {"uninitialized"} (Redis lost the activity)
-- or {"first_come"} (no queue here).

-- @include sale_window
-- @include queue_view

local q, refused = queue_state()
if refused then
  return refused
end
local user = ARGV[1]
if ARGV[3] == 'forget' and redis.call('HEXISTS', KEYS[2], user) == 1 then
  redis.call('ZREM', KEYS[4], user)
end
advance(q, tonumber(ARGV[2]))
return view(q, user, ARGV[4])
