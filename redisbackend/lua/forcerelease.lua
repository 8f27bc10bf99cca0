-- forcerelease: ARGV = channel, publish command. Ends the live lease,
-- whoever holds it, and replies 1 if one was live. Without a lock delay
-- it marks the lease released as its own release would ('r' and the
-- time); with one it
-- writes 'f' and the delay's end, which the grant script reads.
local h = redis.call('HMGET', key, 'exp', 'delay')
local e = tonumber(h[1])
if not (e and now < e) then return 0 end
local d = tonumber(h[2]) or 0
if d > 0 then
  redis.call('HSET', key, 'exp', string.format('f%.0f', now + d))
else
  redis.call('HSET', key, 'exp', string.format('r%.0f', now))
end
redis.call(ARGV[2], ARGV[1], '')
return 1
