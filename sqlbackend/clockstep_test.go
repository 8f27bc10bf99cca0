package sqlbackend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/internal/testing/faketime"
	"github.com/fencing-go/fencing/internal/testing/mysqltest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// TestPostgresServerClockSteps runs conformance.RunClockStep on postgres
// under libfaketime.
func TestPostgresServerClockSteps(t *testing.T) {
	clock, _, h := newSkewedPostgres(t, 0)
	conformance.RunClockStep(t, &steppedSQL{h: h, clock: clock, serverNow: func(t testing.TB) (server time.Time) {
		if err := h.db.QueryRow(`SELECT clock_timestamp()`).Scan(&server); err != nil {
			t.Fatal(err)
		}
		return server
	}})
}

// TestMySQLServerClockSteps runs conformance.RunClockStep on mariadbd
// under libfaketime.
func TestMySQLServerClockSteps(t *testing.T) {
	clock := faketime.New(t, 0)
	srv := mysqltest.StartConfig(t, mysqltest.Config{Env: clock.Env()})
	h := &harness{db: srv.DB(t), dialect: sqlbackend.MySQL}
	conformance.RunClockStep(t, &steppedSQL{h: h, clock: clock, serverNow: func(t testing.TB) time.Time {
		var micros int64
		if err := h.db.QueryRow(`SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)`).Scan(&micros); err != nil {
			t.Fatal(err)
		}
		return time.UnixMicro(micros)
	}})
}

// steppedSQL is a conformance.ClockStepper and StoreAdmitter on a server
// under libfaketime: serverNow reads the server's wall clock.
type steppedSQL struct {
	h         *harness
	clock     *faketime.Clock
	serverNow func(t testing.TB) time.Time
}

func (s *steppedSQL) NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error) {
	return s.h.NewBackend(ctx, t)
}

// StepClock steps the server's wall clock to offset from ours and waits
// until the server reads it there.
func (s *steppedSQL) StepClock(t testing.TB, offset time.Duration) {
	t.Helper()
	if err := s.clock.Set(offset); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		skew := s.serverNow(t).Sub(time.Now())
		if skew > offset-time.Minute && skew < offset+time.Minute {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's clock is %v from ours a minute after a step to %v", skew, offset)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Admits reports whether AdmitTx admits token for key.
func (s *steppedSQL) Admits(ctx context.Context, t testing.TB, b backend.Backend, key string, token uint64) bool {
	t.Helper()
	tx, err := s.h.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	err = b.(*sqlbackend.Backend).AdmitTx(ctx, tx, key, token)
	if err != nil && !errors.Is(err, guard.ErrStaleToken) {
		t.Fatalf("AdmitTx(%d): %v", token, err)
	}
	return err == nil
}
