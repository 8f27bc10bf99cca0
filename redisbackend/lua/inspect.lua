-- inspect: replies {live, token, max token, exp, µs left} ('1' or '0' for
-- live; '0' for the fields of a lease that is not live), or {} for a key
-- never leased. Never the lease ID.
if not tok then return {} end
if live then return {'1', tok, tok, exp, string.format('%.0f', tonumber(exp) - now)} end
return {'0', '0', tok, '0', '0'}
