-- dequeue: takes the waiter's entry out of the line, if it is there, and
-- wakes the waiter behind it. Replies 1 if the entry was in the line.
if not redis.call('ZSCORE', line, ARGV[1]) then return 0 end
remove({ARGV[1]})
return 1
