-- reclaim: KEYS = the floor, then records in its slot; ARGV = retention µs.
-- Deletes each record idle for the retention on the server's clock and
-- raises the floor to the highest token it deleted, in this one step, so a
-- later grant on the key reads a floor at least its last token (grant.lua).
-- Replies how many records it deleted. A record is idle from when its last
-- lease ended and any lock delay after it: exp + delay after an expiry,
-- the time after 'r' (released) or 'f' (a forced release's delay end). A
-- record whose end has no time ('r' written before releases were stamped,
-- a counter set without a lease) is stamped idle from now.
local retention = tonumber(ARGV[1])
local floor = redis.call('GET', key) or '0'
local top, n = floor, 0
-- above: a > b for decimal integers without leading zeros, exactly (a
-- token can pass 2^53, where doubles lose digits).
local function above(a, b)
  return #a > #b or (#a == #b and a > b)
end
for i = 2, #KEYS do
  local k = KEYS[i]
  local h = redis.call('HMGET', k, 'token', 'exp', 'delay')
  local tok, exp = h[1], h[2]
  if tok then
    local since = tonumber(exp)
    if since then
      since = since + (tonumber(h[3]) or 0)
    elseif exp and (string.byte(exp) == 114 or string.byte(exp) == 102) then -- 'r', 'f'
      since = tonumber(string.sub(exp, 2))
    end
    if not since then
      redis.call('HSET', k, 'exp', string.format('r%.0f', now))
    elseif now - since >= retention then
      if above(tok, top) then top = tok end
      redis.call('DEL', k)
      n = n + 1
    end
  end
end
if top ~= floor then redis.call('SET', key, top) end
return n
