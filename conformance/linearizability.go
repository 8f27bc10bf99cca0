package conformance

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// VisualizationDirEnv names the environment variable that sets where
// CheckHistory writes the visualization of a history that fails; the
// default is os.TempDir().
const VisualizationDirEnv = "FENCING_PORCUPINE_DIR"

// checkTimeout bounds porcupine's search. Histories of the size this suite
// records are decided in well under a second.
const checkTimeout = 2 * time.Minute

// CheckLinearizable fails t unless history is linearizable: see
// CheckHistory. Call it from the test's goroutine once the calls have
// returned.
func CheckLinearizable(t testing.TB, history []Op, traits Traits) {
	t.Helper()
	if err := CheckHistory(history, traits); err != nil {
		t.Fatal(err)
	}
}

// CheckHistory checks a recorded history (see Recorder) with porcupine
// against a sequential model of the contract of package backend: one lease
// register per key, holding the most recent lease's ID, its token, the
// highest token minted and the lease's end. In the model:
//
//   - Grant succeeds only on a free, released or expired key, with a token
//     above every token minted (exactly one above with
//     traits.DenseTokens), and a resent grant returns its lease unchanged;
//   - Renew succeeds only for the live lease's ID and keeps its token;
//   - Release ends only the live lease, and a resent release succeeds;
//   - Token reports the live lease's token, and no lease when none is live;
//   - GrantMany takes every key at one moment or none: its leases follow
//     Grant's rules key by key, a refusal names the first refusing key in
//     key order (every key before it would have been granted then) and
//     changes nothing, and a lost GrantMany took all its keys or none (the
//     keys GrantMany calls join are checked together, at most 8);
//   - each error is the one the contract gives for the state (ErrLeaseHeld,
//     ErrLeaseExpired, ErrLeaseNotFound), bad input is refused with the
//     checks' error, and a refused grant never tells of more time left than
//     the lease can have;
//   - a lease ends no sooner than Timeout + Margin after its grant or
//     renewal was sent and no later than TTL + Margin + traits.Slack after
//     it returned, on the coordinator's clock (the recorder's reading of
//     it);
//   - a call whose error wraps backend.ErrOutcomeUnknown may have taken
//     effect at any time after it was sent; any other error means it did
//     not;
//   - with traits.Retention, a key whose lease ended at least that long
//     before a call was processed may read, from that call on, as a key
//     never leased, its next token still above every earlier one (see
//     "Retention" in package backend's doc).
//
// A history that no order of its calls explains is written as porcupine's
// HTML visualization to a file in $FENCING_PORCUPINE_DIR (default
// os.TempDir()), whose path the error gives.
func CheckHistory(history []Op, traits Traits) error {
	if len(history) == 0 {
		return nil
	}
	ops := porcupineHistory(history)
	part, slots, err := partitionKeys(ops)
	if err != nil {
		return err
	}
	m := model{slack: traits.Slack, dense: traits.DenseTokens, retention: traits.Retention, slots: slots}
	pm := m.porcupineModel(part)
	res, info := porcupine.CheckOperationsVerbose(pm, ops, checkTimeout)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return fmt.Errorf("conformance: the linearizability check of %d calls did not finish within %v; record a shorter history", len(history), checkTimeout)
	}
	msg := fmt.Sprintf("conformance: the history of %d calls is not linearizable: no order of the calls on %s explains their results under the lease model",
		len(history), strings.Join(failingKeys(pm, ops), ", "))
	path, err := writeVisualization(pm, info)
	if err != nil {
		return fmt.Errorf("%s (writing the visualization failed: %v)", msg, err)
	}
	return fmt.Errorf("%s; porcupine's visualization: %s", msg, path)
}

// porcupineHistory converts a history, putting times in nanoseconds from
// its first call on each clock.
func porcupineHistory(history []Op) []porcupine.Operation {
	first := slices.MinFunc(history, func(a, b Op) int { return a.Call.Compare(b.Call) })
	coordFirst := slices.MinFunc(history, func(a, b Op) int { return a.CoordCall.Compare(b.CoordCall) })
	ops := make([]porcupine.Operation, 0, len(history))
	for i := range history {
		op := &history[i]
		c := &call{op: op, out: classify(op.Err), cCall: int64(op.CoordCall.Sub(coordFirst.CoordCall)), cRet: int64(op.CoordReturn.Sub(coordFirst.CoordCall))}
		ret := int64(op.Return.Sub(first.Call))
		if c.out == unknown {
			ret, c.cRet = math.MaxInt64, math.MaxInt64 // it may take effect at any later time
		}
		if op.Kind == OpGrantMany {
			c.parts = partsOf(c)
		}
		if op.Kind == OpToken && op.Err != nil && c.out != rejected {
			continue // a failed read tells nothing
		}
		ops = append(ops, porcupine.Operation{ClientId: op.Client, Input: c, Output: c, Call: int64(op.Call.Sub(first.Call)), Return: ret})
	}
	return ops
}

// failingKeys returns the keys whose calls alone (with the keys GrantMany
// calls join to them) are not linearizable, quoted and sorted.
func failingKeys(pm porcupine.Model, ops []porcupine.Operation) []string {
	var keys []string
	for _, part := range pm.Partition(ops) {
		if porcupine.CheckOperationsTimeout(pm, part, checkTimeout) != porcupine.Ok {
			keys = append(keys, keysOf(part)...)
		}
	}
	slices.SortFunc(keys, cmp.Compare)
	if len(keys) == 0 {
		return []string{"some key"}
	}
	return keys
}

func writeVisualization(pm porcupine.Model, info porcupine.LinearizationInfo) (string, error) {
	dir := os.Getenv(VisualizationDirEnv)
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "fencing-history-*.html")
	if err != nil {
		return "", err
	}
	err = porcupine.Visualize(pm, info, f)
	return f.Name(), errors.Join(err, f.Close())
}
