-- linelength: KEYS = the line and the due times (as line.lua's). Replies
-- how many entries end after now on the server's clock: the live ones. A
-- read: it drops no entry that ran out (line.lua's work, which writes).
return redis.call('ZCOUNT', KEYS[2], string.format('(%.0f', now), '+inf')
