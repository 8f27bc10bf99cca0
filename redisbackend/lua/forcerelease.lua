-- forcerelease: ARGV = channel, publish command. Ends the live lease,
-- whoever holds it, as its own release would; replies 1 if one was live.
local e = tonumber(redis.call('HGET', key, 'exp'))
if not (e and now < e) then return 0 end
redis.call('HSET', key, 'exp', 'r')
redis.call(ARGV[2], ARGV[1], '')
return 1
