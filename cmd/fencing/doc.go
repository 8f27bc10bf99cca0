// Command fencing runs and inspects leases with fencing tokens from the
// shell: on a SQLite file per user (the default, which fences the processes
// of one machine), PostgreSQL, etcd, Redis or the in-memory backend.
//
// Usage:
//
//	fencing <command> [flags]
//
// The commands are:
//
//	demo     show a stale writer being stopped by its fencing token
//	get      show a key's state: live or not, token, expiry
//	list     list keys with their state
//	grant    take a lease, for scripts
//	renew    extend a lease, for scripts
//	release  end a lease (or, with --force, whoever holds it)
//	hold     run a command while holding a lease
//	watch    stream a key's (or a prefix's) grants, renewals and ends
//	elect    campaign for leadership and run a command while leader
//	leader   show who leads an election (--watch to follow it)
//	sem      run a command while holding one of N permits
//
// Run "fencing <command> --help" for a command's flags, and see docs/cli.md
// for backends, exit codes and examples.
package main
