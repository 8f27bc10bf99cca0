-- The fence check that every guard script starts with.
-- KEYS[1] is the fence; ARGV[1] the token, a decimal uint64 without leading
-- zeros. Tokens are compared as decimal strings (by length, then digit by
-- digit), never as Lua numbers, which are doubles and lose precision above
-- 2^53. A stale token ends the script with the error 'FENCING_STALE <fence>'
-- before anything is written.
local fence = redis.call('GET', KEYS[1])
local token = ARGV[1]
local function below(a, b) -- a < b, for decimal strings
	if #a ~= #b then
		return #a < #b
	end
	for i = 1, #a do
		local x, y = string.byte(a, i), string.byte(b, i)
		if x ~= y then
			return x < y
		end
	end
	return false
end
if fence and below(token, fence) then
	return redis.error_reply('FENCING_STALE ' .. fence)
end
