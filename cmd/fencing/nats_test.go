package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/fencing-go/fencing/natsbackend/natstest"
)

// TestNATS runs the command with --backend nats against a real nats-server
// (found or built by natstest): hold gives its command a token that the
// next hold outgrows, grant/get/release work across invocations, and the
// refusal of a single-replica bucket names the CLI's flag, not the Go
// option.
func TestNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server")
	}
	srv := natstest.Start(t)
	_, js := srv.Connect(t)
	bucket := natstest.Bucket(t, js)
	// nats puts the backend's flags right after the subcommand: after
	// hold's "--" they would be the command's arguments.
	nats := func(args ...string) []string {
		return append([]string{args[0], "--backend", "nats", "--nats-url", srv.URL, "--nats-bucket", bucket, "--nats-check", "warn"}, args[1:]...)
	}

	t.Run("Hold", func(t *testing.T) {
		r := want(t, 0, nats("hold", "jobs/a", "--ttl", "5s", "--", "sh", "-c", `echo "$FENCING_KEY $FENCING_TOKEN"`)...)
		key, tok, _ := strings.Cut(strings.TrimSpace(r.stdout), " ")
		first, err := strconv.ParseUint(tok, 10, 64)
		if key != "jobs/a" || err != nil || first == 0 {
			t.Fatalf("the command saw %q, want FENCING_KEY=jobs/a and a token", r.stdout)
		}
		r = want(t, 7, nats("hold", "jobs/a", "--ttl", "5s", "--", "sh", "-c", `echo "$FENCING_TOKEN"; exit 7`)...)
		if next, err := strconv.ParseUint(strings.TrimSpace(r.stdout), 10, 64); err != nil || next <= first {
			t.Errorf("second hold: token %q after %d, want a larger one", r.stdout, first)
		}
	})

	t.Run("Flow", func(t *testing.T) {
		var l leaseJSON
		wantJSON(t, &l, nats("grant", "flow", "--ttl", "10s", "--json")...)
		if l.Token == 0 || l.LeaseID == "" {
			t.Fatalf("grant: %+v", l)
		}
		if r := want(t, exitHeld, nats("grant", "flow", "--ttl", "10s")...); !strings.Contains(r.stderr, "held") {
			t.Errorf("held grant: %v", r)
		}
		var st stateJSON
		wantJSON(t, &st, nats("get", "flow", "--json")...)
		if !st.Live || st.Token != l.Token {
			t.Errorf("get after grant: %+v, lease %+v", st, l)
		}
		want(t, 0, nats("release", "flow", "--lease-id", l.LeaseID)...)
		wantJSON(t, &st, nats("get", "flow", "--json")...)
		if st.Live {
			t.Errorf("get after release: %+v", st)
		}
	})

	t.Run("Refusal", func(t *testing.T) {
		r := want(t, exitError, "get", "k", "--backend", "nats", "--nats-url", srv.URL, "--nats-bucket", bucket)
		if !strings.Contains(r.stderr, "replicas is 1") || !strings.Contains(r.stderr, "--nats-check warn") || strings.Contains(r.stderr, "WithSafetyCheck") {
			t.Errorf("refusal: %v", r)
		}
	})
}
