package conformance

import (
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
	"github.com/fencing-go/fencing/backend"
)

// Several keys in one call: a GrantMany joins the registers of its keys.
// The model checks the keys that GrantMany calls join as one partition, a
// tuple of registers, so that a GrantMany takes effect on all its keys at
// one moment (all or none), and a history that sees some of its keys taken
// and others not at one moment is refused. Keys that no GrantMany joins are
// checked alone, as before.

// maxJoined is the most keys GrantMany calls may join into one partition.
const maxJoined = 8

// regs is the state of a partition: a register per key, in the key's slot
// (see partitionKeys), with the key's name once a call has touched it. It is comparable, as
// porcupine's default equality needs.
type regs struct {
	keys [maxJoined]string
	regs [maxJoined]keyState
}

// slot returns the index of key's register, and names it in rs.
func (m model) slot(rs *regs, key string) int {
	i := m.slots[key]
	rs.keys[i] = key
	return i
}

func (rs regs) String() string {
	var parts []string
	for i, k := range rs.keys {
		if k != "" {
			parts = append(parts, fmt.Sprintf("%q: %v", k, rs.regs[i]))
		}
	}
	if len(parts) == 0 {
		return "free"
	}
	return strings.Join(parts, "; ")
}

// next returns the partition's states after c, from rs.
func (m model) next(rs regs, c *call) []regs {
	if c.op.Kind == OpGrantMany {
		return m.grantMany(rs, c)
	}
	i := m.slot(&rs, c.op.Key)
	var out []regs
	for _, s := range m.step(rs.regs[i], c) {
		n := rs
		n.regs[i] = s
		out = append(out, n)
	}
	return out
}

// grantMany returns the states after a GrantMany: every key granted at
// one moment, or none changed. A refusal names the first refusing key in
// key order, so every key before it would have been granted at that moment.
func (m model) grantMany(rs regs, c *call) []regs {
	op := c.op
	if err := backend.CheckMany(op.Requests); err != nil {
		if op.Err == nil || !errors.Is(op.Err, sentinelOf(err)) {
			return nil
		}
		return []regs{rs}
	}
	switch c.out {
	case rejected:
		return nil // the arguments were fine
	case noEffect:
		return []regs{rs}
	case ok:
		if len(op.Leases) != len(op.Requests) {
			return nil
		}
		return m.each(rs, c, func(_ int, s keyState, p *call) []keyState { return m.during(s, p, m.grant) })
	case unknown:
		took := m.each(rs, c, func(_ int, s keyState, p *call) []keyState {
			return m.during(s, p, func(s keyState, p *call) []keyState {
				if s.status == live && s.id == p.op.LeaseID {
					return []keyState{s} // a resend: its lease, unchanged
				}
				return m.effect(s, p)
			})
		})
		return append([]regs{rs}, took...)
	}
	refused, isMany := backend.ManyIndex(op.Err)
	if !isMany || refused >= len(op.Requests) {
		return nil // a verdict must name its request
	}
	before := make([]bool, len(op.Requests))
	for _, j := range backend.KeyOrder(op.Requests) {
		if j == refused {
			break
		}
		before[j] = true
	}
	return m.each(rs, c, func(j int, s keyState, p *call) []keyState {
		switch {
		case j == refused:
			return m.during(s, p, m.grant)
		case before[j]:
			return m.during(s, p, func(s keyState, p *call) []keyState {
				if grantable(s, p.op.LeaseID) {
					return []keyState{s}
				}
				return nil
			})
		}
		return []keyState{s}
	})
}

// grantable reports whether a grant of lease id on a key in state s would
// be answered with a lease (a new one, or its own resent).
func grantable(s keyState, id string) bool {
	if s.status == live {
		return s.id == id
	}
	return s.id != id && !s.exhausted
}

// each returns every combination of f's states for the keys of c's
// requests (f gets the request's index, its key's state and its part of
// c), with the other keys unchanged: none when f has none for some key.
func (m model) each(rs regs, c *call, f func(int, keyState, *call) []keyState) []regs {
	out := []regs{rs}
	for j, p := range c.parts {
		i := m.slots[p.op.Key]
		for k := range out {
			m.slot(&out[k], p.op.Key)
		}
		var grown []regs
		for _, r := range out {
			for _, s := range f(j, r.regs[i], p) {
				n := r
				n.regs[i] = s
				grown = append(grown, n)
			}
		}
		if len(grown) == 0 {
			return nil
		}
		out = grown
	}
	return out
}

// partsOf returns a GrantMany's grants as single-key calls, sharing c's
// outcome and times.
func partsOf(c *call) []*call {
	op := c.op
	parts := make([]*call, len(op.Requests))
	for i, r := range op.Requests {
		g := &Op{Client: op.Client, Kind: OpGrant, Key: r.Key, LeaseID: r.LeaseID, Timeout: r.Timeout, Margin: r.Margin, Err: op.Err,
			Call: op.Call, Return: op.Return, CoordCall: op.CoordCall, CoordReturn: op.CoordReturn}
		if i < len(op.Leases) {
			g.Lease = op.Leases[i]
		}
		parts[i] = &call{op: g, out: c.out, cCall: c.cCall, cRet: c.cRet}
	}
	return parts
}

// partitionKeys returns each call's partition, and each key's register in
// its partition's state: the keys that valid GrantMany calls join share a
// partition, other keys have one each, and a GrantMany refused for its
// arguments is checked alone. It fails when a partition would have more
// than maxJoined keys.
func partitionKeys(ops []porcupine.Operation) (part map[*call]int, slots map[string]int, err error) {
	parent := make(map[string]string)
	var find func(k string) string
	find = func(k string) string {
		p, ok := parent[k]
		if !ok || p == k {
			parent[k] = k
			return k
		}
		r := find(p)
		parent[k] = r
		return r
	}
	joins := func(op *Op) bool { return op.Kind == OpGrantMany && backend.CheckMany(op.Requests) == nil }
	for _, o := range ops {
		op := o.Input.(*call).op
		switch {
		case joins(op):
			first := find(op.Requests[0].Key)
			for _, r := range op.Requests[1:] {
				parent[find(r.Key)] = first
			}
		case op.Kind != OpGrantMany:
			find(op.Key)
		}
	}
	members := make(map[string][]string)
	for k := range parent {
		members[find(k)] = append(members[find(k)], k)
	}
	slots = make(map[string]int, len(parent))
	for _, keys := range members {
		if len(keys) > maxJoined {
			return nil, nil, fmt.Errorf("conformance: GrantMany calls join %d keys into one; the checker takes at most %d", len(keys), maxJoined)
		}
		slices.Sort(keys)
		for i, k := range keys {
			slots[k] = i
		}
	}
	ids := make(map[string]int)
	part = make(map[*call]int, len(ops))
	next := 0
	for _, o := range ops {
		c := o.Input.(*call)
		var root string
		switch {
		case joins(c.op):
			root = find(c.op.Requests[0].Key)
		case c.op.Kind == OpGrantMany:
			part[c] = next // alone
			next++
			continue
		default:
			root = find(c.op.Key)
		}
		id, ok := ids[root]
		if !ok {
			id = next
			next++
			ids[root] = id
		}
		part[c] = id
	}
	return part, slots, nil
}

// porcupineModel is the model as porcupine's, partitioned as part says.
func (m model) porcupineModel(part map[*call]int) porcupine.Model {
	seed := maphash.MakeSeed()
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byPart := make(map[int][]porcupine.Operation)
			var order []int
			for _, o := range history {
				p := part[o.Input.(*call)]
				if _, seen := byPart[p]; !seen {
					order = append(order, p)
				}
				byPart[p] = append(byPart[p], o)
			}
			parts := make([][]porcupine.Operation, 0, len(order))
			for _, p := range order {
				parts = append(parts, byPart[p])
			}
			return parts
		},
		Init: func() []any { return []any{regs{}} },
		Step: func(state, input, _ any) []any {
			var next []any
			for _, n := range m.next(state.(regs), input.(*call)) {
				next = append(next, n)
			}
			return next
		},
		Hash:              func(state any) uint64 { return maphash.Comparable(seed, state.(regs)) },
		DescribeOperation: func(input, _ any) string { return input.(*call).String() },
		DescribeState:     func(state any) string { return state.(regs).String() },
	}
	return nm.ToModel()
}

// keysOf returns the keys of a partition's calls, quoted and sorted.
func keysOf(ops []porcupine.Operation) []string {
	var keys []string
	for _, o := range ops {
		op := o.Input.(*call).op
		if op.Kind != OpGrantMany {
			keys = append(keys, fmt.Sprintf("key %q", op.Key))
		}
		for _, r := range op.Requests {
			keys = append(keys, fmt.Sprintf("key %q", r.Key))
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}
