-- After fence.lua: the guard's own writes. KEYS[i+1] is the key of the i-th
-- operation; from ARGV[2] on, each operation is its name, its number of
-- arguments and the arguments:
--   SET  1 value
--   HSET 2n field value ...
--   DEL  0
--   DROP 0      (its key is KEYS[1], the fence: delete it at the end)
-- Every operation is checked before the first one is applied (HSET needs a
-- hash or no key, as the keys will be when its turn comes), so the script
-- either fails having written nothing or applies them all and then raises
-- the fence, or deletes it when a DROP was among them.
local types = {}
local i, k = 2, 2
while i <= #ARGV do
	local op, n, key = ARGV[i], tonumber(ARGV[i + 1]), KEYS[k]
	local t = types[key] or redis.call('TYPE', key).ok
	if op == 'SET' then
		t = 'string'
	elseif op == 'HSET' then
		if t ~= 'none' and t ~= 'hash' then
			return redis.error_reply('WRONGTYPE HSET on a key holding a ' .. t .. ': nothing was written')
		end
		t = 'hash'
	elseif op == 'DEL' or op == 'DROP' then
		t = 'none'
	else
		return redis.error_reply('ERR unknown guarded operation ' .. op)
	end
	types[key] = t
	i, k = i + 2 + n, k + 1
end
local drop = false
i, k = 2, 2
while i <= #ARGV do
	local op, n = ARGV[i], tonumber(ARGV[i + 1])
	if op == 'DROP' then
		drop = true
	else
		redis.call(op, KEYS[k], unpack(ARGV, i + 2, i + 1 + n))
	end
	i, k = i + 2 + n, k + 1
end
if drop then
	redis.call('DEL', KEYS[1])
else
	redis.call('SET', KEYS[1], token)
end
return 1
