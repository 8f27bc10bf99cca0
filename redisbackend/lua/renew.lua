-- renew: ARGV as grant (the owner and the lock delay are the grant's,
-- kept). Replies {'ok', token, exp} or a status.
local h = redis.call('HMGET', key, 'token', 'id', 'exp')
local e = tonumber(h[3]) -- nil once released
if h[2] ~= ARGV[1] or not e then return {'notfound'} end
if now >= e then return {'expired'} end
e = now + tonumber(ARGV[4])
redis.call('HSET', key, 'exp', e, 'ttl', ARGV[2], 'margin', ARGV[3])
return {'ok', h[1], e}
