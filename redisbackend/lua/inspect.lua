-- inspect: replies {live, token, max token, exp, µs left} ('1' or '0' for
-- live; '0' for the fields of a lease that is not live), or {} for a key
-- never leased. Never the lease ID.
local h = redis.call('HMGET', key, 'token', 'exp')
local tok, exp = h[1], h[2]
if not tok then return {} end
local e = tonumber(exp)
if e and now < e then return {'1', tok, tok, exp, string.format('%.0f', e - now)} end
return {'0', '0', tok, '0', '0'}
