// Package bench compares the fencing Redis backend with other Redis lock
// libraries and with a bare PING round trip, all against one redis-server.
//
// It is a separate module so that the libraries it compares against
// (github.com/bsm/redislock, github.com/go-redsync/redsync/v4) stay out of
// the fencing module's dependencies. Everything is in its tests:
//
//	cd bench && go test -run '^$' -bench . -benchtime 2s -count 3
//
// The benchmarks start their own redis-server (from PATH) on a free loopback
// port, or use the server at REDIS_ADDR (host:port) when it is set; that
// server must be one nobody else uses, as the benchmarks write keys under
// the prefix "bench:". See docs/benchmarks.md in the fencing repository for
// the method and the current results, and RUNLOG.md here for the dated runs.
//
// TestReport is the one-command report of every store against its peers
// (memory against the original single-mutex design, Redis against redislock,
// redsync and PING, etcd against concurrency.Mutex, and the Lock handoff
// under contention on etcd, with and without FIFO, against
// concurrency.Mutex); see
// report_test.go and docs/benchmarks.md:
//
//	cd bench && BENCH_REPORT=all go test -run '^TestReport$' -v -count=1 .
//
// TestPGPairCounts prints what one Grant+Release pair costs a durable
// PostgreSQL server (statements, commits, WAL, HOT updates, execution time,
// the backends' CPU) for ours, a hand-written row lease and pglock's
// pattern, BENCH_PGCOUNTS pairs each (50 in CI, skipped elsewhere without it;
// BENCH_PGEXPLAIN=1 adds the plans of our pair's statements):
//
//	cd bench && BENCH_PGCOUNTS=2000 go test -run '^TestPGPairCounts$' -v -count=1 .
//
// TestSoak runs every backend in turn (memory, SQLite, PostgreSQL, MariaDB,
// Redis, etcd) under mixed traffic while a nemesis stalls the network,
// freezes holders and kills the server, checks that no stale write lands
// and that tokens only rise, and that goroutines, heap, FDs, connections and
// store records do not creep; SOAK is the time per backend (without it, a
// smoke of a few seconds each, as CI runs it). See soak_test.go and
// docs/scale.md:
//
//	cd bench && SOAK=60s go test -run '^TestSoak$' -v .
package bench
