// Command docker-entrypoint starts redis-server the way the official redis
// image's docker-entrypoint.sh does, for the local test image
// fencing-test/redis, which has no shell (see scripts/build-test-images.sh).
//
// The official image runs its CMD through that script, and testcontainers'
// modules/redis relies on it: a command that starts with an option
// ("--appendonly yes") or a config file ("/etc/redis.conf") is run as
// redis-server's arguments, and "redis-server ..." is run as is. The
// official image also builds redis-server with protected mode off, since a
// container's clients never come from its own loopback; this entrypoint
// passes --protected-mode no ahead of the caller's options instead, so a
// caller's own --protected-mode yes still wins.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// server is where the image keeps redis-server.
const server = "/usr/local/bin/redis-server"

func main() {
	args := os.Args[1:]
	switch {
	case len(args) == 0:
	case args[0] == "redis-server" || args[0] == server:
		args = args[1:]
	case strings.HasPrefix(args[0], "-") || strings.HasSuffix(args[0], ".conf"):
	default:
		// Not redis-server: run the command as given, like the official
		// entrypoint does.
		path, err := exec.LookPath(args[0])
		if err != nil {
			fail(err)
		}
		fail(syscall.Exec(path, args, os.Environ()))
	}

	argv := []string{"redis-server"}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		// The config file must be redis-server's first argument.
		argv = append(argv, args[0])
		args = args[1:]
	}
	argv = append(argv, "--protected-mode", "no")
	argv = append(argv, args...)
	fail(syscall.Exec(server, argv, os.Environ()))
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "docker-entrypoint: %v\n", err)
	os.Exit(127)
}
