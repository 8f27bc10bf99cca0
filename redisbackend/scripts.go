package redisbackend

import (
	"context"
	"crypto/sha1"
	_ "embed" // the scripts
	"encoding/hex"
	"errors"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The scripts keep a key's whole record in one hash without a TTL (see
// records.go). Each is prelude.lua, which reads the server's clock,
// followed by the operation, which reads only the fields it needs. Expiry
// is decided by the server's TIME inside the script, never by a time the
// client sends. Microsecond timestamps (about 1.8e15) plus at most
// MaxDuration (3.2e13 µs) stay far below 2^53, so Lua's doubles hold them
// exactly; string.format('%.0f') writes them back without an exponent. A
// token passes through a Lua number only below 2^53-1, where a double holds
// it and its successor exactly; beyond, the grant script has Redis add
// (HINCRBY) and reads the sum back as a string. That spares a grant two
// calls (each redis.call costs the server about a microsecond). Scripts
// call TIME and then write: Redis 5 and later replicate a script by its
// effects, the only mode in Redis 7.
//
// The line's scripts (queue.go) are the prelude, line.lua, which drops
// the entries whose time ran out, and then the operation; they run on the
// line's two sorted sets (KEYS[1] and KEYS[2]), in the record's slot.
// linelength.lua, a read, runs on the same keys without line.lua.
//
// Every script reads first and writes last, and writes only after every
// check passed, so a script that fails changes nothing. Limits (the largest
// token) and names (the channel, the publish command) are arguments, so
// one script serves every prefix and client.

var (
	//go:embed lua/prelude.lua
	preludeLua string
	//go:embed lua/grant.lua
	grantLua string
	//go:embed lua/renew.lua
	renewLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/forcerelease.lua
	forceReleaseLua string
	//go:embed lua/token.lua
	tokenLua string
	//go:embed lua/inspect.lua
	inspectLua string
	//go:embed lua/line.lua
	lineLua string
	//go:embed lua/enqueue.lua
	enqueueLua string
	//go:embed lua/dequeue.lua
	dequeueLua string
	//go:embed lua/linelength.lua
	lineLengthLua string
)

var (
	grantScript        = newScript(grantLua)
	renewScript        = newScript(renewLua)
	releaseScript      = newScript(releaseLua)
	forceReleaseScript = newScript(forceReleaseLua)
	tokenScript        = newScript(tokenLua)
	inspectScript      = newScript(inspectLua)
	enqueueScript      = newScript(lineLua + enqueueLua)
	dequeueScript      = newScript(lineLua + dequeueLua)
	lineLengthScript   = newScript(lineLengthLua)
)

// script is a Lua script run by its SHA1 (EVALSHA), with its source (EVAL)
// when the server's script cache lacks it. The two are also kept boxed, so
// that putting them in a command's arguments does not allocate.
type script struct {
	src, hash       string
	srcArg, hashArg any
}

func newScript(body string) *script {
	src := preludeLua + body
	sum := sha1.Sum([]byte(src))
	hash := hex.EncodeToString(sum[:])
	return &script{src: src, hash: hash, srcArg: src, hashArg: hash}
}

// cmd returns the script's EVALSHA (or, with source set, EVAL) command on
// the one key it reads and writes. go-redis never resends it (see
// onceCmd).
func (s *script) cmd(ctx context.Context, source bool, key string, args []any) onceCmd {
	return s.cmdKeys(ctx, source, []string{key}, args)
}

// cmdKeys is cmd on several keys, all in one hash slot.
func (s *script) cmdKeys(ctx context.Context, source bool, keys []string, args []any) onceCmd {
	a := s.argvKeys(keys, args)
	if source {
		a[0], a[1] = evalArg, s.srcArg
	}
	return onceCmd{redis.NewCmd(ctx, a...)}
}

// argvKeys is the script's EVALSHA command on keys with args.
func (s *script) argvKeys(keys []string, args []any) []any {
	a := s.argv(len(keys), len(keys)+len(args))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}

// The command names and numkeys, boxed once, so that putting them in a
// command's arguments does not allocate.
var (
	evalshaArg, evalArg any = "evalsha", "eval"
	numKeysArgs             = [...]any{"0", "1", "2", "3"}
)

// argv returns the start of the script's EVALSHA command on nkeys keys,
// with room for n more arguments, which the caller appends: the keys, all
// in one hash slot, then the script's arguments. Built whole this way, the
// command's arguments are one allocation (see runArgv).
func (s *script) argv(nkeys, n int) []any {
	a := make([]any, 3, 3+n)
	a[0], a[1] = evalshaArg, s.hashArg
	// numkeys as a string: go-redis's Cluster routing reads it as one.
	if nkeys < len(numKeysArgs) {
		a[2] = numKeysArgs[nkeys]
	} else {
		a[2] = strconv.Itoa(nkeys)
	}
	return a
}

// withSource returns the EVAL form of a, a command built by argv: a copy,
// since a command already made of a keeps it.
func (s *script) withSource(a []any) []any {
	src := slices.Clone(a)
	src[0], src[1] = evalArg, s.srcArg
	return src
}

// run sends the script once by its SHA1, and its source if the server
// lacks it, in one round trip when the cache has it.
func (s *script) run(ctx context.Context, c processor, key string, args ...any) *redis.Cmd {
	return s.runKeys(ctx, c, []string{key}, args...)
}

// runKeys is run on several keys, all in one hash slot.
func (s *script) runKeys(ctx context.Context, c processor, keys []string, args ...any) *redis.Cmd {
	return s.runArgv(ctx, c, s.argvKeys(keys, args))
}

// runArgv is run on a command built by argv.
func (s *script) runArgv(ctx context.Context, c processor, a []any) *redis.Cmd {
	cmd := onceCmd{redis.NewCmd(ctx, a...)}
	if err := c.Process(ctx, cmd); abandoned(err) {
		return failed(ctx, err)
	}
	if isNoScript(cmd.Err()) { // nothing ran: send the source
		cmd = onceCmd{redis.NewCmd(ctx, s.withSource(a)...)}
		if err := c.Process(ctx, cmd); abandoned(err) {
			return failed(ctx, err)
		}
	}
	return cmd.Cmd
}

// failed returns a command that failed with err, for a caller that must
// not read the command it sent (see abandoned).
func failed(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// processor is what runs a command: a client, a node's client, a pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

func isNoScript(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "NOSCRIPT") || errors.Is(err, redis.ErrNoScript))
}

// onceCmd is a command that go-redis sends at most once (its retry loop
// asks NoRetry after a failed attempt). A resend is the caller's decision
// (fencing.Coordinator resends with the same lease ID), taken knowing the
// outcome was unknown; and with one attempt, an error that shows the
// request never left (a refused dial) means nothing happened, which a
// resend by go-redis after a lost reply would hide.
type onceCmd struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (onceCmd) NoRetry() bool { return true }
