package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/fencing-go/fencing/backend"
	"github.com/redis/go-redis/v9"
)

// Token implements backend.Backend. The server's clock decides liveness,
// as in every other operation. On a *redis.Client, which talks to one
// server, it is cheaper than a script (docs/benchmarks.md, Redis): HMGET of the
// record and then TIME, pipelined on one connection, so the clock is read
// after the record. A lease the record shows live at a TIME before its end
// was live when the record was read, and a released or never-granted one
// was not live then either. Only a lease that looks ended by its time (it
// expired, or TIME came late and a renewal moved its end meanwhile), or
// whose end this code cannot read, is asked again, by the read-only
// script, which reads both at one instant. On other clients (a Cluster, a
// Ring), which could send TIME to another server, it is the script alone.
func (b *Backend) Token(ctx context.Context, key string) (uint64, bool, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return 0, false, err
	}
	rk := b.RedisKey(key)
	if b.pipeToken {
		tok, live, sure, err := b.pipelinedToken(ctx, rk)
		if sure || err != nil {
			return tok, live, err
		}
	}
	s, err := tokenScript.run(ctx, b.batch, rk).Text()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, sendError(ctx, "token", err)
	}
	return parseToken(s)
}

// pipelinedToken reads the record and then the server's clock (see
// Token). sure is false when the script must decide.
func (b *Backend) pipelinedToken(ctx context.Context, rk string) (tok uint64, live, sure bool, err error) {
	fields := redis.NewCmd(ctx, "hmget", rk, "token", "exp")
	clock := redis.NewCmd(ctx, "time")
	if err := b.batch.do(ctx, fields, clock); abandoned(err) {
		return 0, false, true, sendError(ctx, "token", err)
	}
	h, err := fields.Slice()
	if err == nil {
		var t []any
		if t, err = clock.Slice(); err == nil {
			return readToken(h, t)
		}
	}
	return 0, false, true, sendError(ctx, "token", err)
}

// readToken reads the replies of HMGET token exp and TIME.
func readToken(h, t []any) (tok uint64, live, sure bool, err error) {
	if len(h) != 2 || len(t) != 2 {
		return 0, false, true, fmt.Errorf("redisbackend: token: %w: %d fields, %d clock values", errBadReply, len(h), len(t))
	}
	exp, _ := h[1].(string)
	if exp == "" || exp[0] == 'r' || exp[0] == 'f' {
		return 0, false, true, nil // never leased, or released (by force: 'f')
	}
	e, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return 0, false, false, nil // not written as digits: the script reads any number
	}
	sec, _ := t[0].(string)
	usec, _ := t[1].(string)
	s, err1 := strconv.ParseInt(sec, 10, 64)
	us, err2 := strconv.ParseInt(usec, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, false, true, fmt.Errorf("redisbackend: token: %w: TIME: %w", errBadReply, err)
	}
	if s*1_000_000+us >= e {
		return 0, false, false, nil // looks ended: ask the script
	}
	ts, _ := h[0].(string)
	tok, live, err = parseToken(ts)
	return tok, live, true, err
}

// parseToken reads a live lease's token.
func parseToken(s string) (uint64, bool, error) {
	tok, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("redisbackend: token: %w %q: %w", errBadReply, s, err)
	}
	return tok, true, nil
}
