-- renew: ARGV as grant (the owner is the grant's, kept). Replies {'ok', token, exp} or a status.
local h = redis.call('HMGET', key, 'token', 'id', 'exp')
if h[2] ~= ARGV[1] or h[3] == 'r' then return {'notfound'} end
local e = tonumber(h[3])
if not (e and now < e) then return {'expired'} end
e = now + tonumber(ARGV[4])
redis.call('HSET', key, 'exp', e, 'ttl', ARGV[2], 'margin', ARGV[3])
return {'ok', h[1], e}
