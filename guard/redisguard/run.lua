-- After fence.lua: the caller's script, as a function of its own keys and
-- arguments (the fence and the token taken off), then the new fence. If the
-- caller's script fails (raises an error or returns an error reply), the
-- fence does not move; what it wrote before it
-- failed stays written, as with any Redis script.
local function caller(KEYS, ARGV)
--[[BODY]]
end
local keys, argv = {}, {}
for i = 2, #KEYS do
	keys[i - 1] = KEYS[i]
end
for i = 2, #ARGV do
	argv[i - 1] = ARGV[i]
end
local reply = caller(keys, argv)
if type(reply) == 'table' and reply.err then
	return reply -- an error reply: the fence stays
end
redis.call('SET', KEYS[1], token)
return reply
