-- token: replies the live lease's token, or nil.
local h = redis.call('HMGET', key, 'token', 'exp')
local e = tonumber(h[2])
if e and now < e then return h[1] end
return false
