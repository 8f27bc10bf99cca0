-- enqueue: ARGV after line.lua's = ttl µs. Puts the waiter at the end of
-- the line, or renews its live entry in place, for ttl from now. Replies
-- {entries ahead, µs the entry directly ahead has left (0 at the head)}.
local id = ARGV[1]
if not redis.call('ZSCORE', line, id) then
  local last = redis.call('ZRANGE', line, -1, -1, 'WITHSCORES')[2]
  redis.call('ZADD', line, (tonumber(last) or 0) + 1, id)
end
redis.call('ZADD', due, now + tonumber(ARGV[4]), id)
local rank = redis.call('ZRANK', line, id)
local left = 0
if rank > 0 then
  local ahead = redis.call('ZRANGE', line, rank - 1, rank - 1)[1]
  left = math.max((tonumber(redis.call('ZSCORE', due, ahead)) or now) - now, 0)
end
-- The line's keys live as long as their last entry, so a line that
-- everyone left without a word is gone by itself.
local ms = math.ceil((tonumber(redis.call('ZRANGE', due, -1, -1, 'WITHSCORES')[2]) - now) / 1000)
redis.call('PEXPIRE', line, ms)
redis.call('PEXPIRE', due, ms)
return {rank, left}
