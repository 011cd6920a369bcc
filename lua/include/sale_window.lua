-- sale_window.lua (included by the scripts that need the time): one clock for every gateway.
--
-- redis_now_ms()                          Redis's own clock (TIME), in milliseconds
-- outside_window(starts, ends, now)       the script's answer when `now` is outside
--                                         [starts, ends): {"not_started", starts, now} or
--                                         {"ended"}; nil inside the window

local function redis_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function outside_window(starts_ms, ends_ms, now_ms)
  if now_ms < starts_ms then
    return {'not_started', starts_ms, now_ms}
  end
  if now_ms >= ends_ms then
    return {'ended'}
  end
  return nil
end
