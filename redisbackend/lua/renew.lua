-- renew: ARGV as grant. Replies {'ok', token, exp, ttl, margin} or a status.
if id ~= ARGV[1] or rel then return {'notfound'} end
if not live then return {'expired'} end
exp = string.format('%.0f', now + tonumber(ARGV[4]))
redis.call('HSET', key, 'exp', exp, 'ttl', ARGV[2], 'margin', ARGV[3])
return {'ok', tok, exp, ARGV[2], ARGV[3]}
