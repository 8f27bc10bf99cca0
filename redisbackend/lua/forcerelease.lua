-- forcerelease: ARGV = channel, publish command. Ends the live lease,
-- whoever holds it, as its own release would; replies 1 if one was live.
if not live then return 0 end
redis.call('HSET', key, 'rel', '1')
redis.call(ARGV[2], ARGV[1], '')
return 1
