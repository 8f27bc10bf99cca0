package memorybackend_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/memorybackend"
)

// FuzzModel runs a random sequence of calls on one backend over a fake
// clock, recorded, and checks the history against the conformance suite's
// lease model (conformance.CheckHistory). The first byte, when below 16,
// caps the tokens at that value, so sequences reach the end of the token
// space; from 224 it sets a retention of 1 to 32 ms (the model then
// lets idle keys be reclaimed, and the grants sweep them). The rest is read three bytes a call: what to do, on which key and
// with which of four lease IDs, and a duration: whole milliseconds, less a
// nanosecond when odd (an advance by 1 is one nanosecond), so calls land
// exactly on, just before and just after a lease's end.
func FuzzModel(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 3*300 {
			data = data[:3*300] // keep each run quick
		}
		var opts []memorybackend.Option
		var retention time.Duration
		if len(data) > 0 {
			switch {
			case data[0] < 16:
				opts = append(opts, memorybackend.WithMaxToken(uint64(data[0])))
			case data[0] >= 224:
				retention = time.Duration(data[0]-223) * time.Millisecond
				opts = append(opts, memorybackend.WithRetention(retention))
			}
			data = data[1:]
		}
		clock := memorybackend.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		mem := memorybackend.New(append(opts, memorybackend.WithClock(clock))...)
		defer mem.Close()
		rec := conformance.NewRecorder(clock.Now)
		b := rec.Wrap(mem)
		ctx := context.Background()
		keys := []string{"a", "b", "a\x00"}
		var ids [4]string
		for i := 0; i+2 < len(data); i += 3 {
			key := keys[int(data[i+1])%len(keys)]
			slot := int(data[i+1]>>2) % len(ids)
			d := time.Duration(data[i+2]/2)*time.Millisecond - time.Duration(data[i+2]&1)
			timeout := max(d, time.Nanosecond)
			switch data[i] % 9 {
			case 0:
				ids[slot] = fmt.Sprintf("lease-%d", i)
				b.Grant(ctx, backend.Request{Key: key, LeaseID: ids[slot], Timeout: timeout, Margin: time.Millisecond})
			case 1:
				b.Renew(ctx, backend.Request{Key: key, LeaseID: cmpOr(ids[slot]), Timeout: timeout, Margin: time.Millisecond})
			case 2:
				b.Release(ctx, key, cmpOr(ids[slot]))
			case 3:
				b.Token(ctx, key)
			case 4:
				if data[i+2] == 1 {
					d = time.Nanosecond // the one step past an end
				}
				clock.Advance(d)
			case 5: // a resent grant
				b.Grant(ctx, backend.Request{Key: key, LeaseID: cmpOr(ids[slot]), Timeout: timeout, Margin: time.Millisecond})
			case 6:
				b.(backend.ForceReleaser).ForceRelease(ctx, key)
			case 7: // bad input
				b.Grant(ctx, backend.Request{Key: key, LeaseID: "bad", Timeout: -d, Margin: time.Millisecond})
			case 8:
				b.Renew(ctx, backend.Request{Key: key, LeaseID: cmpOr(ids[slot]), Timeout: timeout, Margin: -1})
			}
		}
		conformance.CheckLinearizable(t, rec.History(), conformance.Traits{Now: clock.Now, DenseTokens: true, Retention: retention})
	})
}

// cmpOr returns id, or an ID never granted when the slot is empty.
func cmpOr(id string) string {
	if id == "" {
		return "never-granted"
	}
	return id
}
