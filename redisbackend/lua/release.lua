-- release: ARGV = lease ID, channel, publish command (PUBLISH or SPUBLISH).
-- Replies {'ok'} or a status; a release that ends a live lease publishes
-- on the key's channel.
local h = redis.call('HMGET', key, 'id', 'exp')
if h[1] ~= ARGV[1] then return {'notfound'} end
if h[2] == 'r' then return {'ok'} end
local e = tonumber(h[2])
if not (e and now < e) then return {'expired'} end
redis.call('HSET', key, 'exp', 'r')
redis.call(ARGV[3], ARGV[2], '')
return {'ok'}
