package ctxend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing/internal/ctxend"
)

// pastDeadline has a deadline that has passed, and has not ended.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

func TestErr(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	future, stop := context.WithTimeout(context.Background(), time.Hour)
	defer stop()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"no deadline", context.Background(), nil},
		{"deadline ahead", future, nil},
		{"deadline passed, not ended", pastDeadline{context.Background()}, context.DeadlineExceeded},
		{"canceled", canceled, context.Canceled},
	} {
		if got := ctxend.Err(c.ctx); !errors.Is(got, c.want) || (c.want == nil) != (got == nil) {
			t.Errorf("%s: Err = %v, want %v", c.name, got, c.want)
		}
	}
}
