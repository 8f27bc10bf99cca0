-- grantmany: KEYS = the records, in key order, then their floor (one
-- slot, one floor: floor.go); ARGV = max token, then six
-- per key: lease ID, ttl ms, margin ns, ttl+margin µs, owner, lock delay µs.
-- Checks every key as grant.lua does, in order, and writes only once none
-- refused. Replies {'ok', token, exp, ttl, margin, ...} (four per key,
-- for a resend the lease already granted) or {status, i, µs left} for the
-- first key i (from 1) that refused.
local toks, resent, fresh = {}, {}, {}
local nk = #KEYS - 1
local floor
for i = 1, nk do
  local a, k = (i - 1) * 6 + 1, KEYS[i]
  local h = redis.call('HMGET', k, 'token', 'id', 'exp')
  local tok, id, exp = h[1], h[2], h[3]
  local e = tonumber(exp)
  local live = e and now < e
  if id == ARGV[a + 1] then
    if exp and not e then return {'released', i} end
    if not live then return {'expired', i} end
    resent[i] = true
  else
    local closed
    if e then
      closed = e + (tonumber(redis.call('HGET', k, 'delay')) or 0)
      if live then return {'held', i, closed - now} end
    elseif exp and string.byte(exp) == 102 then -- 'f'
      closed = tonumber(string.sub(exp, 2))
    end
    if closed and now < closed then return {'delayed', i, closed - now} end
    if not tok then -- no record: above the floor, as grant.lua
      floor = floor or redis.call('GET', KEYS[#KEYS]) or '0'
      tok, fresh[i] = floor, floor
    end
    if tok == ARGV[1] then return {'exhausted', i} end
    toks[i] = tonumber(tok)
  end
end
local reply = {'ok'}
for i = 1, nk do
  local a, k = (i - 1) * 6 + 1, KEYS[i]
  if resent[i] then
    local h = redis.call('HMGET', k, 'token', 'exp', 'ttl', 'margin')
    reply[#reply + 1], reply[#reply + 2], reply[#reply + 3], reply[#reply + 4] = h[1], h[2], h[3], h[4]
  else
    local e = now + tonumber(ARGV[a + 4])
    local n = toks[i]
    if n < 9007199254740991 then -- 2^53-1: n+1 is exact in a double
      n = n + 1
      redis.call('HSET', k, 'token', n)
    else
      if fresh[i] then redis.call('HSET', k, 'token', fresh[i]) end
      redis.call('HINCRBY', k, 'token', 1)
      n = redis.call('HGET', k, 'token')
    end
    redis.call('HSET', k, 'id', ARGV[a + 1], 'exp', e, 'ttl', ARGV[a + 2], 'margin', ARGV[a + 3], 'owner', ARGV[a + 5], 'delay', ARGV[a + 6])
    reply[#reply + 1], reply[#reply + 2], reply[#reply + 3], reply[#reply + 4] = n, e, ARGV[a + 2], ARGV[a + 3]
  end
end
return reply
