-- queue_status.lua: where a user stands in a `queue` or `draw` activity's queue (ARGV[1] a
-- user id), or the queue as a whole (ARGV[1] ""), after moving it forward: one round trip
-- for a poll. KEYS as in include/queue_view.lua. ARGV[2] an admission's life, ms (the
-- purchase URL's). ARGV[3] "forget": the user just bought; their admission ends now.
--
-- Returns the view of include/queue_view.lua, or {"uninitialized"} (Redis lost the activity)
-- or {"first_come"} (no queue here).

-- @include queue_view

local user = ARGV[1]
if ARGV[3] == 'forget' then
  redis.call('ZREM', KEYS[4], user)
end
advance(tonumber(ARGV[2]))
return view(user)
