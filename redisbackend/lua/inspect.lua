-- inspect: replies {} for a key never leased, else {live, token, max
-- token, exp, µs left, lock delay µs, delay's end, µs of delay left,
-- owner}: 0 for the fields that do not apply (the lease's while none is
-- live, the delay's while the key is not in one) and no owner unless a
-- lease is live. Never the lease ID.
local h = redis.call('HMGET', key, 'token', 'exp', 'owner', 'delay')
local tok, exp = h[1], h[2]
if not tok then return {} end
local e = tonumber(exp)
local d = tonumber(h[4]) or 0
if e and now < e then return {1, tok, tok, e, e - now, d, 0, 0, h[3] or ''} end
local closed = 0
if e then
  closed = e + d
elseif exp and string.byte(exp) == 102 then -- 'f': a forced release's delay
  closed = tonumber(string.sub(exp, 2)) or 0
end
if now < closed then return {0, 0, tok, 0, 0, 0, closed, closed - now, ''} end
return {0, 0, tok, 0, 0, 0, 0, 0, ''}
