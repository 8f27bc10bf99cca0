-- release: ARGV = lease ID, channel, publish command (PUBLISH or SPUBLISH).
-- Replies {'ok'} or a status; a release that ends a live lease publishes
-- on the key's channel.
if id ~= ARGV[1] then return {'notfound'} end
if rel then return {'ok'} end
if not live then return {'expired'} end
redis.call('HSET', key, 'rel', '1')
redis.call(ARGV[3], ARGV[2], '')
return {'ok'}
