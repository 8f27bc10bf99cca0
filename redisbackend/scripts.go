package redisbackend

import "github.com/redis/go-redis/v9"

// The scripts keep a key's whole record in one hash without a TTL, so a key
// is one Redis key in one hash slot and no eviction policy that spares keys
// without a TTL (noeviction, volatile-*) can touch it:
//
//	token   highest token ever minted on the key (a decimal int64, never
//	        passed through a Lua number: HINCRBY's reply is one, so the
//	        scripts read the field back as a string)
//	id      the most recent lease's ID
//	exp     when that lease ends: server TIME in microseconds since the epoch
//	rel     "1" once that lease was released
//	ttl     its granted timeout in milliseconds (as sent)
//	margin  its margin in nanoseconds (as sent)
//
// Expiry is decided by the server's TIME inside the script, never by a time
// the client sends. Microsecond timestamps (about 1.8e15) plus at most
// MaxDuration (3.2e13 µs) stay far below 2^53, so Lua's doubles hold them
// exactly; string.format('%.0f') writes them back without an exponent.
// Scripts call TIME and then write: Redis 5 and later replicate a script by
// its effects (the HSET with the computed values), the only mode in Redis 7.
//
// Every script reads first and writes last, and writes only after every
// check passed, so a script that fails changes nothing.

// scriptPrelude reads the server's clock and the key's record.
const scriptPrelude = `
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local h = redis.call('HMGET', key, 'token', 'id', 'exp', 'rel', 'ttl', 'margin')
local tok, id, exp, rel = h[1], h[2], h[3], h[4] == '1'
local live = id and (not rel) and exp and now < tonumber(exp)
`

// grantScript: ARGV = lease ID, ttl ms, margin ns, ttl+margin in µs.
// Replies {status, token, exp, ttl, margin}.
var grantScript = redis.NewScript(scriptPrelude + `
if id == ARGV[1] then
  if rel then return {'released'} end
  if live then return {'ok', tok, exp, h[5], h[6]} end
  return {'expired'}
end
if live then return {'held'} end
if tok == '` + maxTokenString + `' then return {'exhausted', tok} end
redis.call('HINCRBY', key, 'token', 1)
tok = redis.call('HGET', key, 'token')
exp = string.format('%.0f', now + tonumber(ARGV[4]))
redis.call('HSET', key, 'id', ARGV[1], 'exp', exp, 'rel', '0', 'ttl', ARGV[2], 'margin', ARGV[3])
return {'ok', tok, exp, ARGV[2], ARGV[3]}
`)

// renewScript: ARGV as grantScript. Replies {status, token, exp, ttl, margin}.
var renewScript = redis.NewScript(scriptPrelude + `
if id ~= ARGV[1] or rel then return {'notfound'} end
if not live then return {'expired'} end
exp = string.format('%.0f', now + tonumber(ARGV[4]))
redis.call('HSET', key, 'exp', exp, 'ttl', ARGV[2], 'margin', ARGV[3])
return {'ok', tok, exp, ARGV[2], ARGV[3]}
`)

// releaseScript: ARGV = lease ID. Replies {status}.
var releaseScript = redis.NewScript(scriptPrelude + `
if id ~= ARGV[1] then return {'notfound'} end
if rel then return {'ok'} end
if not live then return {'expired'} end
redis.call('HSET', key, 'rel', '1')
return {'ok'}
`)

// tokenScript replies the live lease's token, or nil.
var tokenScript = redis.NewScript(scriptPrelude + `
if live then return tok end
return false
`)
