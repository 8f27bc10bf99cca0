-- Shared by the line's scripts, after the prelude: KEYS = the line (waiter
-- IDs by join sequence) and the due times (the same IDs by when their
-- entry ends, server µs); ARGV = waiter ID, the turn channels' prefix,
-- publish command (PUBLISH or SPUBLISH), then the script's own.
local line, due = KEYS[1], KEYS[2]
local woken = {[ARGV[1]] = true} -- the caller learns its place from the reply

-- turn wakes the waiter now directly behind the entry that had sequence
-- seq and left, on that waiter's own channel: once per script, and only it.
local function turn(seq)
  local next = redis.call('ZRANGEBYSCORE', line, string.format('(%.0f', seq), '+inf', 'LIMIT', 0, 1)[1]
  if next and not woken[next] then
    woken[next] = true
    redis.call(ARGV[3], ARGV[2] .. redis.sha1hex(next), '')
  end
end

-- remove takes the entries ids out of the line and wakes the waiter behind
-- each.
local function remove(ids)
  local seqs = {}
  for i, id in ipairs(ids) do seqs[i] = redis.call('ZSCORE', line, id) end
  redis.call('ZREM', line, unpack(ids))
  redis.call('ZREM', due, unpack(ids))
  for _, s in ipairs(seqs) do
    if s then turn(tonumber(s)) end
  end
end

-- First, every entry whose time ran out on this clock leaves (a thousand
-- at a time, so that unpack stays within Lua's stack).
local gone
repeat
  gone = redis.call('ZRANGEBYSCORE', due, '-inf', string.format('%.0f', now), 'LIMIT', 0, 1000)
  if #gone > 0 then remove(gone) end
until #gone < 1000
