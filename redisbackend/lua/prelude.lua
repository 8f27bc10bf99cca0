-- Shared by every script: the record's key and the server's clock (µs).
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
