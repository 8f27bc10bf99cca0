-- grant: KEYS = the record and the floor (floor.go); ARGV = lease ID,
-- ttl ms, margin ns, ttl+margin µs, max token, owner, lock delay µs.
-- Replies {'ok', token, exp} for a new lease (its ttl and margin are the
-- request's), {'ok', token, exp, ttl, margin} for a resend of the lease
-- already granted, {'held', µs left} while a lease is live (its time left
-- plus its lock delay), {'delayed', µs left} during a lock delay, or a
-- status.
local h = redis.call('HMGET', key, 'token', 'id', 'exp')
local tok, id, exp = h[1], h[2], h[3]
local e = tonumber(exp) -- nil once released: 'r', or 'f' and the delay's end
local live = e and now < e
if id == ARGV[1] then
  if exp and not e then return {'released'} end
  if not live then return {'expired'} end
  h = redis.call('HMGET', key, 'ttl', 'margin')
  return {'ok', tok, exp, h[1], h[2]}
end
-- The lock delay is read only where it matters: a live lease, or one
-- that expired. A forced release wrote the delay's end into exp.
local closed
if e then
  closed = e + (tonumber(redis.call('HGET', key, 'delay')) or 0)
  if live then return {'held', closed - now} end
elseif exp and string.byte(exp) == 102 then -- 'f'
  closed = tonumber(string.sub(exp, 2))
end
if closed and now < closed then return {'delayed', closed - now} end
-- A key with no record (never leased, or reclaimed) starts above the
-- floor, which every reclaim raised to the token of the key it deleted.
local fresh = not tok
if fresh then tok = redis.call('GET', KEYS[2]) or '0' end
if tok == ARGV[5] then return {'exhausted'} end
e = now + tonumber(ARGV[4])
local n = tonumber(tok)
if n < 9007199254740991 then -- 2^53-1: n+1 is exact in a double
  n = n + 1
  redis.call('HSET', key, 'token', n, 'id', ARGV[1], 'exp', e, 'ttl', ARGV[2], 'margin', ARGV[3], 'owner', ARGV[6], 'delay', ARGV[7])
  return {'ok', n, e}
end
-- Beyond, Redis adds, and the token is read back as a string.
if fresh then redis.call('HSET', key, 'token', tok) end
redis.call('HINCRBY', key, 'token', 1)
tok = redis.call('HGET', key, 'token')
redis.call('HSET', key, 'id', ARGV[1], 'exp', e, 'ttl', ARGV[2], 'margin', ARGV[3], 'owner', ARGV[6], 'delay', ARGV[7])
return {'ok', tok, e}
