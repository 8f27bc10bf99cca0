-- release: ARGV = lease ID, channel, publish command (PUBLISH or SPUBLISH).
-- Replies {'ok'} or a status; a release that ends a live lease publishes
-- on the key's channel. Released is 'r' and the release's time (server
-- µs), from which a reclaim counts the key idle (sweep.go). A lease already
-- released ('r', or 'f' after a forced release) is left as it is: a
-- resent release changes nothing.
local h = redis.call('HMGET', key, 'id', 'exp')
if h[1] ~= ARGV[1] then return {'notfound'} end
local e = tonumber(h[2])
if not e then return {'ok'} end
if now >= e then return {'expired'} end
redis.call('HSET', key, 'exp', string.format('r%.0f', now))
redis.call(ARGV[3], ARGV[2], '')
return {'ok'}
