-- Shared by every script: read the server's clock and the key's record.
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local h = redis.call('HMGET', key, 'token', 'id', 'exp', 'rel', 'ttl', 'margin')
local tok, id, exp, rel = h[1], h[2], h[3], h[4] == '1'
local live = id and (not rel) and exp and now < tonumber(exp)
