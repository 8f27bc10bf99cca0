-- token: replies the live lease's token, or nil.
if live then return tok end
return false
