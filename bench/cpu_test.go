package bench

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// measureCPU starts counting the CPU time that the benchmark process (the
// client) and the redis-server (from INFO cpu) spend; the function it
// returns reports both per operation as "client-µs/op" and "server-µs/op".
// Unlike ns/op, CPU time hardly grows when other processes compete for the
// cores, so these two say where an operation's cost is even on a busy
// machine.
func measureCPU(b *testing.B, c *redis.Client) (stop func()) {
	b.Helper()
	cli0, srv0 := clientCPU(b), serverCPU(b, c)
	return func() {
		b.Helper()
		cli1, srv1 := clientCPU(b), serverCPU(b, c)
		n := float64(b.N)
		b.ReportMetric(float64(cli1-cli0)/float64(time.Microsecond)/n, "client-µs/op")
		b.ReportMetric(float64(srv1-srv0)/float64(time.Microsecond)/n, "server-µs/op")
	}
}

// clientCPU returns the user and system CPU time of this process.
func clientCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU returns the user and system CPU time of the redis-server's main
// process (used_cpu_sys + used_cpu_user of INFO cpu, in seconds with
// microsecond resolution).
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatalf("INFO cpu: %v", err)
	}
	var total time.Duration
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
			continue
		}
		secs, err := strconv.ParseFloat(value, 64)
		if err != nil {
			b.Fatalf("INFO cpu: %s: %v", line, err)
		}
		total += time.Duration(secs * float64(time.Second))
	}
	return total
}
