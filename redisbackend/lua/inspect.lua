-- inspect: replies {live, token, max token, exp, µs left, owner} (1 or 0
-- for live; 0 for the fields of a lease that is not live, and no owner),
-- or {} for a key never leased. Never the lease ID.
local h = redis.call('HMGET', key, 'token', 'exp', 'owner')
local tok = h[1]
if not tok then return {} end
local e = tonumber(h[2])
if e and now < e then return {1, tok, tok, e, e - now, h[3] or ''} end
return {0, 0, tok, 0, 0}
