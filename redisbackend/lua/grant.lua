-- grant: ARGV = lease ID, ttl ms, margin ns, ttl+margin µs, max token.
-- Replies {'ok', token, exp, ttl, margin}, {'held', µs left}, or a status.
if id == ARGV[1] then
  if rel then return {'released'} end
  if live then return {'ok', tok, exp, h[5], h[6]} end
  return {'expired'}
end
if live then return {'held', string.format('%.0f', tonumber(exp) - now)} end
if tok == ARGV[5] then return {'exhausted'} end
redis.call('HINCRBY', key, 'token', 1)
tok = redis.call('HGET', key, 'token')
exp = string.format('%.0f', now + tonumber(ARGV[4]))
redis.call('HSET', key, 'id', ARGV[1], 'exp', exp, 'rel', '0', 'ttl', ARGV[2], 'margin', ARGV[3])
return {'ok', tok, exp, ARGV[2], ARGV[3]}
