-- grant: ARGV = lease ID, ttl ms, margin ns, ttl+margin µs, max token,
-- owner.
-- Replies {'ok', token, exp} for a new lease (its ttl and margin are the
-- request's), {'ok', token, exp, ttl, margin} for a resend of the lease
-- already granted, {'held', µs left}, or a status.
local h = redis.call('HMGET', key, 'token', 'id', 'exp')
local tok, id, exp = h[1], h[2], h[3]
local e = tonumber(exp) -- nil once released ('r')
local live = e and now < e
if id == ARGV[1] then
  if exp == 'r' then return {'released'} end
  if not live then return {'expired'} end
  h = redis.call('HMGET', key, 'ttl', 'margin')
  return {'ok', tok, exp, h[1], h[2]}
end
if live then return {'held', e - now} end
if tok == ARGV[5] then return {'exhausted'} end
e = now + tonumber(ARGV[4])
local n = tonumber(tok or '0')
if n < 9007199254740991 then -- 2^53-1: n+1 is exact in a double
  n = n + 1
  redis.call('HSET', key, 'token', n, 'id', ARGV[1], 'exp', e, 'ttl', ARGV[2], 'margin', ARGV[3], 'owner', ARGV[6])
  return {'ok', n, e}
end
-- Beyond, Redis adds, and the token is read back as a string.
redis.call('HINCRBY', key, 'token', 1)
tok = redis.call('HGET', key, 'token')
redis.call('HSET', key, 'id', ARGV[1], 'exp', e, 'ttl', ARGV[2], 'margin', ARGV[3], 'owner', ARGV[6])
return {'ok', tok, e}
