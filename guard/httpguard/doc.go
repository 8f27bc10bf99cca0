// Package httpguard carries a fencing token over HTTP, from the holder of a
// lease to the service that does the write.
//
// The client wraps its transport with Transport: every request whose
// context carries a token (a fencing.Held's Context, or one made with
// guard.ContextWithToken) goes out with a Fencing-Token header. The
// service wraps its handler with Middleware, which puts the header's token
// in the request's context, where the handler finds it with
// guard.TokenFromContext (guard.TokensFromContext for several) and passes
// it to its store guard with the write.
//
// # The header
//
// One header, one token (a request with several tokens, from a
// fencing.HeldMany's context, carries one header line per resource, up to
// guard.MaxTokensPerRequest; a line of several values joined by commas, as
// a proxy may fold the lines, is read as those lines):
//
//	Fencing-Token: 42; resource="orders%2F42"
//
//	Fencing-Token = token OWS ";" OWS "resource=" DQUOTE escaped DQUOTE
//	token         = %x31-39 *19DIGIT   ; decimal, 1 to 2^64-1, no leading zeros
//	escaped       = *( ALPHA / DIGIT / "-" / "." / "_" / "~" / "%" HEXDIG HEXDIG )
//
// The resource (usually the lease key, 1 to 1024 bytes, any bytes) is
// percent-encoded byte by byte: every byte other than A-Z a-z 0-9 - . _ ~
// is written "%" and two hex digits (upper-case when sent; either case is
// read), so no value holds a comma. No other parameter is allowed. A
// request with a malformed header, token 0, an empty or too long resource,
// more than guard.MaxTokensPerRequest values, or two naming one resource
// with different tokens is answered 400 Bad Request with a text/plain body
// saying what is wrong.
//
// A token refused as stale is answered 409 Conflict, with the fence in the
// same syntax and the guard's message as the body:
//
//	HTTP/1.1 409 Conflict
//	Fencing-Fence: 57; resource="orders%2F42"
//
//	stale token: token 42 is below 57, the fence of resource "orders/42"
//
// (a fence of 0 means the service did not learn it). WriteStale writes
// that answer; CheckResponse reads it back as a *guard.StaleTokenError.
// A service in another language speaks the same header with any HTTP
// library; docs/across-services.md has the details.
//
// # A check before the handler is not a check with the write
//
// Admitting the token in a middleware and then letting the handler write to
// a database is NOT fencing. Between the admit and the write, the handler
// can stall; a newer holder can write meanwhile; and the stale write then
// lands on top of it, exactly the race a fencing token exists to stop. The
// check must be in the database's own atomic step with the write, so the
// handler passes the context's token to the store guard itself:
//
//	func (s *server) setTotal(w http.ResponseWriter, r *http.Request) {
//		resource, token, ok := guard.TokenFromContext(r.Context())
//		if !ok {
//			http.Error(w, "send a Fencing-Token header", http.StatusPreconditionRequired)
//			return
//		}
//		err := s.fences.Write(r.Context(), s.db, nil, resource, token, func(tx *sql.Tx) error {
//			_, err := tx.ExecContext(r.Context(), `UPDATE orders SET total = $1 WHERE id = $2`, total, id)
//			return err
//		}) // sqlguard: the fence and the UPDATE commit together, or neither does
//		if httpguard.WriteStale(w, resource, err) {
//			return // 409: a later holder got there first; nothing was written
//		}
//		...
//	}
//
// The same goes for etcdguard (one Txn) and redisguard (one script).
//
// Only for a resource in the service's own memory can the middleware do
// the whole step: WithWriter(guard.NewMemory()) admits the token and runs
// the handler under the resource's lock, as guard.Memory.Write does.
//
// A service should also write only the resource the token names (the
// token of "orders/41" says nothing about "orders/42").
//
// # Tokens from the network
//
// A token is not a credential: anyone can send `Fencing-Token:
// 9223372036854775807; ...`, and a guard that admitted it would refuse
// every real holder after it. A service that takes tokens from the network
// authenticates its callers (mTLS, a signed header: see
// docs/across-services.md) and refuses tokens the lock store never minted:
// WithMintCheck in front of the handler (403 Forbidden; 503 when the lock
// store cannot be read), or the store guard's own WithMintCheck, whose
// refusal WriteRefused answers the same way.
package httpguard
