package manager

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

var (
	testFloatSum = RegisterReducer(&Reducer{
		Name: "test.fsum",
		Fold: func(items []Item) (any, error) {
			acc := items[0].Value.(float64)
			for _, it := range items[1:] {
				acc += it.Value.(float64)
			}
			return acc, nil
		},
		Codec: MsgpackCodec[float64](),
	})
	testIntSum = RegisterReducer(&Reducer{
		Name: "test.isum", Exact: true,
		Clone:   func(v any) any { return v },
		Combine: func(a, b any) (any, error) { return a.(int64) + b.(int64), nil },
		Codec:   MsgpackCodec[int64](),
	})
)

func TestTree(t *testing.T) {
	cases := []struct {
		members  []int
		k        int
		pe       int
		parent   int
		children []int
	}{
		{[]int{0, 1, 2, 3, 4, 5}, 2, 0, -1, []int{1, 2}},
		{[]int{0, 1, 2, 3, 4, 5}, 2, 1, 0, []int{3, 4}},
		{[]int{0, 1, 2, 3, 4, 5}, 2, 2, 0, []int{5}},
		{[]int{0, 1, 2, 3, 4, 5}, 2, 5, 2, nil},
		{[]int{7, 3, 9}, 4, 9, 7, nil},
		{[]int{7, 3, 9}, 4, 7, -1, []int{3, 9}},
		{[]int{7, 3, 9}, 4, 8, -1, nil}, // not a member
	}
	for _, c := range cases {
		tr := NewTree(c.members, c.k)
		require.Equal(t, c.parent, tr.Parent(c.pe), "%v k=%d pe=%d", c.members, c.k, c.pe)
		require.Equal(t, c.children, tr.Children(c.pe, nil), "%v k=%d pe=%d", c.members, c.k, c.pe)
	}
	pt := PETree(5, 3, 2)
	require.Equal(t, []int{3, 4, 0, 1, 2}, pt.Members)
	require.Equal(t, 3, pt.Parent(0))
	st := SectionTree(2, []int{5, 2, 1, 5, 1}, 4)
	require.Equal(t, []int{2, 1, 5}, st.Members)
	require.ElementsMatch(t, []int{1, 3, 4, 0, 2}, pt.Subtree(3, nil))
	// Every PE of a big tree is reached exactly once from the root.
	big := PETree(100, 17, 4)
	require.Len(t, big.Subtree(17, nil), 100)
}

type simMsg struct {
	from, to int
	p        *Partial
}

// simReduction runs the reduction state machines of a tree of n PEs with
// contributors homed at random, rounds in flight at once, and random but
// per-channel-FIFO delivery, and returns what the root delivered.
func simReduction(t *testing.T, seed uint64, n, k, contributors, rounds int, reducer uint32, deleteAt map[int]uint32) ([]any, []error) {
	rng := rand.New(rand.NewPCG(seed, 7))
	tree := PETree(n, 0, k)
	sms := make([]*Reduction, n)
	for p := range sms {
		sms[p] = NewReduction(tree.Parent(p), tree.Children(p, nil))
	}
	home := make([]int, contributors)
	for i := range home {
		home[i] = rng.IntN(n)
	}
	// The enable-time counts each PE reports to its parent.
	for p := 0; p < n; p++ {
		var acts []RedAction
		for i := range home {
			if home[i] == p {
				acts = sms[p].AddLocal(0, 1, acts)
			}
		}
		require.Empty(t, acts)
	}
	for p := n - 1; p >= 0; p-- { // children before parents
		if par := tree.Parent(p); par >= 0 {
			sms[par].AddChildCount(p, 0, sms[p].SubtreeCount(0), nil)
		}
	}
	var delivered []any
	var errs []error
	chans := map[[2]int][]simMsg{}
	run := func(p int, acts []RedAction) {
		for _, a := range acts {
			switch a.Op {
			case RedSendParent:
				chans[[2]int{p, a.To}] = append(chans[[2]int{p, a.To}], simMsg{p, a.To, a.Partial})
			case RedDeliver:
				delivered = append(delivered, a.Result)
			case RedFail:
				errs = append(errs, a.Err)
			}
		}
	}
	for p := 0; p < n; p++ {
		run(p, sms[p].Enable(nil))
	}
	// Deletions: a contributor stops from a round on; its home and every
	// ancestor learn the new count (what the manager's CountMsg does).
	for i, from := range deleteAt {
		h := home[i]
		run(h, sms[h].AddLocal(from, -1, nil))
		for c, par := h, tree.Parent(h); par >= 0; c, par = par, tree.Parent(par) {
			run(par, sms[par].AddChildCount(c, from, -1, nil))
		}
	}
	// Contributions in a random order (each contributor's own rounds in order).
	next := make([]int, contributors)
	pending := contributors * rounds
	for pending > 0 || len(chans) > 0 {
		if pending > 0 && (len(chans) == 0 || rng.IntN(3) > 0) {
			i := rng.IntN(contributors)
			if next[i] >= rounds {
				continue
			}
			r := next[i]
			next[i]++
			pending--
			if d, ok := deleteAt[i]; ok && uint32(r) >= d {
				continue
			}
			v := any(math.Ldexp(float64(i+1)*1.1, (i*7)%40-20) * float64(r+1))
			if reducer == testIntSum {
				v = int64(i+1) * int64(r+1)
			}
			run(home[i], sms[home[i]].Contribute(uint32(r), pe.Idx(i), reducer, Callback{Kind: CBFuture}, v, nil))
			continue
		}
		keys := make([][2]int, 0, len(chans))
		for key := range chans {
			keys = append(keys, key)
		}
		// map order is random; sort for determinism, then pick by seed
		for a := 1; a < len(keys); a++ {
			for b := a; b > 0 && (keys[b][0] < keys[b-1][0] || keys[b][0] == keys[b-1][0] && keys[b][1] < keys[b-1][1]); b-- {
				keys[b], keys[b-1] = keys[b-1], keys[b]
			}
		}
		key := keys[rng.IntN(len(keys))]
		msg := chans[key][0]
		if chans[key] = chans[key][1:]; len(chans[key]) == 0 {
			delete(chans, key)
		}
		run(msg.to, sms[msg.to].Child(msg.from, msg.p, nil))
	}
	return delivered, errs
}

func TestReductionSimulatedInterleavings(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		n := 1 + int(seed%9)
		k := 2 + int(seed%3)
		contributors := 5 + int(seed*7%40)
		rounds := 1 + int(seed%4)
		deletions := map[int]uint32{}
		if seed%3 == 0 {
			deletions[int(seed)%contributors] = uint32(seed % uint64(rounds))
		}
		for _, red := range []uint32{testFloatSum, testIntSum} {
			t.Run(fmt.Sprintf("seed%d/%s", seed, reducerName(red)), func(t *testing.T) {
				got, errs := simReduction(t, seed, n, k, contributors, rounds, red, deletions)
				require.Empty(t, errs)
				require.Len(t, got, rounds)
				for r := 0; r < rounds; r++ {
					// The canonical fold: contributors in index order.
					var f float64
					var s int64
					first := true
					for i := 0; i < contributors; i++ {
						if d, ok := deletions[i]; ok && uint32(r) >= d {
							continue
						}
						v := math.Ldexp(float64(i+1)*1.1, (i*7)%40-20) * float64(r+1)
						if first {
							f, first = v, false
						} else {
							f += v
						}
						s += int64(i+1) * int64(r+1)
					}
					if red == testIntSum {
						require.Equal(t, s, got[r], "round %d", r)
					} else {
						require.Equal(t, math.Float64bits(f), math.Float64bits(got[r].(float64)), "round %d", r)
					}
				}
			})
		}
	}
}

func TestReductionRejectsMismatches(t *testing.T) {
	s := NewReduction(-1, nil)
	s.AddLocal(0, 3, nil)
	s.Enable(nil)
	cb := Callback{Kind: CBElem, Entry: 5}
	acts := s.Contribute(0, pe.Idx(1), testIntSum, cb, int64(1), nil)
	require.Empty(t, acts)
	acts = s.Contribute(0, pe.Idx(2), testFloatSum, cb, 1.0, nil)
	require.Len(t, acts, 1)
	require.Equal(t, RedFail, acts[0].Op)
	require.ErrorContains(t, acts[0].Err, "contributor [2] uses reducer test.fsum but contributor [1] uses test.isum")

	acts = s.Contribute(0, pe.Idx(3), testIntSum, Callback{Kind: CBElem, Entry: 6}, int64(1), nil)
	require.Len(t, acts, 1)
	require.ErrorContains(t, acts[0].Err, "callback")

	// More contributions than contributors homed here.
	s2 := NewReduction(-1, nil)
	s2.AddLocal(0, 1, nil)
	s2.Enable(nil)
	require.Equal(t, RedDeliver, s2.Contribute(0, pe.Idx(1), testIntSum, cb, int64(1), nil)[0].Op)
	acts = s2.Contribute(0, pe.Idx(1), testIntSum, cb, int64(1), nil)
	require.ErrorContains(t, acts[0].Err, "after the round was complete")

	// A partial from a PE that is not a child.
	acts = s2.Child(9, &Partial{Red: 1}, nil)
	require.ErrorContains(t, acts[0].Err, "not a tree child")
}

func TestReductionRoundsDeliverInOrder(t *testing.T) {
	s := NewReduction(-1, nil)
	s.AddLocal(0, 2, nil)
	s.Enable(nil)
	cb := Callback{Kind: CBFuture}
	// Round 1 completes on this PE before round 0: nothing is delivered
	// until round 0 is, then both in order.
	require.Empty(t, s.Contribute(1, pe.Idx(0), testIntSum, cb, int64(10), nil))
	require.Empty(t, s.Contribute(1, pe.Idx(1), testIntSum, cb, int64(20), nil))
	require.Empty(t, s.Contribute(0, pe.Idx(0), testIntSum, cb, int64(1), nil))
	acts := s.Contribute(0, pe.Idx(1), testIntSum, cb, int64(2), nil)
	require.Len(t, acts, 2)
	require.Equal(t, int64(3), acts[0].Result)
	require.Equal(t, int64(30), acts[1].Result)
}

// A PE recovering by replay learns that rounds are complete at the root:
// they wait only for its own contributions (regenerated by the replay),
// send nothing up and drop what children send for them; later rounds go
// on as usual. Quiescence detection counted the partial its failed
// incarnation sent up and each child's partial it received: a skipped
// round says how many of those will not come again (Missing), and a
// child's copy that does come is not counted (RedCopy).
func TestReductionCompleteBeforeSkipsRoundsTheRootHas(t *testing.T) {
	cb := Callback{Kind: CBFuture}
	s := NewReduction(0, []int{2, 3})
	s.AddLocal(0, 1, nil)
	s.AddChildCount(2, 0, 1, nil)
	s.AddChildCount(3, 0, 1, nil)
	s.Enable(nil)
	copied := []RedAction{{Op: RedCopy}}
	// round 0: child 2's partial came before the news, child 3's never
	require.Empty(t, s.Child(2, &Partial{Red: 0, Reducer: testIntSum, CB: cb, Count: 1, Acc: int64(5)}, nil))
	require.Empty(t, s.CompleteBefore(2, nil), "round 0 still waits for the local contribution")
	require.Equal(t, copied, s.Child(2, &Partial{Red: 0, Reducer: testIntSum, CB: cb, Count: 1, Acc: int64(5)}, nil), "a second copy")
	require.Equal(t, []RedAction{{Op: RedSkipped, To: 0, Missing: 1}}, s.Contribute(0, pe.Idx(0), testIntSum, cb, int64(1), nil))
	require.Equal(t, uint32(1), s.NextReport())
	// round 1: child 3's copy comes after the news, before the skip
	require.Equal(t, copied, s.Child(3, &Partial{Red: 1, Reducer: testIntSum, CB: cb, Count: 1, Acc: int64(7)}, nil))
	require.Equal(t, []RedAction{{Op: RedSkipped, To: 0, Missing: 2}}, s.Contribute(1, pe.Idx(0), testIntSum, cb, int64(2), nil))
	require.Equal(t, uint32(2), s.NextReport())
	require.Equal(t, copied, s.Child(3, &Partial{Red: 1, Reducer: testIntSum, CB: cb, Count: 1, Acc: int64(7)}, nil), "a late partial of a skipped round")
	require.Empty(t, s.Contribute(2, pe.Idx(0), testIntSum, cb, int64(3), nil))
	require.Empty(t, s.Child(2, &Partial{Red: 2, Reducer: testIntSum, CB: cb, Count: 1, Acc: int64(10)}, nil))
	acts := s.Child(3, &Partial{Red: 2, Reducer: testIntSum, CB: cb, Count: 1, Acc: int64(20)}, nil)
	require.Len(t, acts, 1)
	require.Equal(t, RedSendParent, acts[0].Op)
	require.Equal(t, int64(33), acts[0].Partial.Acc)
	require.Equal(t, uint32(2), acts[0].Partial.Red)

	// a PE with no contributor of its own skips at once
	s = NewReduction(0, []int{2})
	s.AddChildCount(2, 0, 1, nil)
	s.Enable(nil)
	require.Len(t, s.CompleteBefore(3, nil), 3)
	require.Equal(t, uint32(3), s.NextReport())
}

// Only values handed over on the PE that folds them are Reusable: a
// child's items may be in its sender's message log, even when they were
// its own there.
func TestReusableItemsAreTheRootsOwn(t *testing.T) {
	cb := Callback{Kind: CBFuture}
	child := NewReduction(0, nil)
	child.AddLocal(0, 2, nil)
	child.Enable(nil)
	root := NewReduction(-1, []int{1})
	root.AddLocal(0, 2, nil)
	root.AddChildCount(1, 0, 2, nil)
	root.Enable(nil)

	require.Empty(t, child.ContributeOwned(0, pe.Idx(1), testFloatSum, cb, 1.0, nil))
	up := child.ContributeOwned(0, pe.Idx(3), testFloatSum, cb, 3.0, nil)
	require.Len(t, up, 1)
	sent := up[0].Partial
	require.True(t, sent.Items[0].Reusable() && sent.Items[1].Reusable(), "the child's own, on the child")

	require.Empty(t, root.ContributeOwned(0, pe.Idx(0), testFloatSum, cb, 0.5, nil))
	require.Empty(t, root.Contribute(0, pe.Idx(4), testFloatSum, cb, 4.0, nil), "came in a message")
	out := root.Child(1, sent, nil)
	require.Len(t, out, 1)
	require.Equal(t, RedDeliver, out[0].Op)
	require.Equal(t, 8.5, out[0].Result)
	var keys []pe.Index
	var reusable []bool
	for _, it := range out[0].Partial.Items {
		keys, reusable = append(keys, it.Key), append(reusable, it.Reusable())
	}
	require.Equal(t, []pe.Index{pe.Idx(0), pe.Idx(1), pe.Idx(3), pe.Idx(4)}, keys)
	require.Equal(t, []bool{true, false, false, false}, reusable)
	require.True(t, sent.Items[0].Reusable(), "the child's partial is left as it was")

	// the child's partial first, then the root's own
	root = NewReduction(-1, []int{1})
	root.AddLocal(0, 1, nil)
	root.AddChildCount(1, 0, 2, nil)
	root.Enable(nil)
	require.Empty(t, root.Child(1, sent, nil))
	out = root.ContributeOwned(0, pe.Idx(2), testFloatSum, cb, 2.0, nil)
	require.Len(t, out, 1)
	reusable = reusable[:0]
	for _, it := range out[0].Partial.Items {
		reusable = append(reusable, it.Reusable())
	}
	require.Equal(t, []bool{false, true, false}, reusable)
}

// A root recovering from its kept result gets it in place of each child's
// partial: the round completes once every child's stands-in and its own
// contributions are in, and delivers the kept result, not a fold. Its own
// contributions may come before or after the result; a partial merged
// before the result changes nothing.
func TestReductionKeptResultStandsInForThePartials(t *testing.T) {
	cb := Callback{Kind: CBFuture}
	for _, c := range []struct {
		name    string
		reducer uint32
		own     any
		kept    any
	}{{"exact", testIntSum, int64(1), int64(100)}, {"canonical", testFloatSum, 0.5, 100.25}} {
		for _, ownFirst := range []bool{true, false} {
			s := NewReduction(-1, []int{1, 2})
			s.AddLocal(0, 1, nil)
			s.AddChildCount(1, 0, 2, nil)
			s.AddChildCount(2, 0, 3, nil)
			s.Enable(nil)
			kept := func(from int) []RedAction {
				return s.Child(from, &Partial{Red: 0, Reducer: c.reducer, CB: cb, Count: 5, Complete: true, Result: c.kept}, nil)
			}
			if ownFirst {
				require.Empty(t, s.Contribute(0, pe.Idx(0), c.reducer, cb, c.own, nil), c.name)
			}
			real := &Partial{Red: 0, Reducer: c.reducer, CB: cb, Count: 2, Acc: int64(7)}
			if c.reducer == testFloatSum {
				real = &Partial{Red: 0, Reducer: c.reducer, CB: cb, Count: 2, Items: []Item{{Key: pe.Idx(3), Value: 1.0}, {Key: pe.Idx(4), Value: 2.0}}}
			}
			require.Empty(t, s.Child(1, real, nil), c.name)
			acts := kept(2)
			if !ownFirst {
				require.Empty(t, acts, "%s: waits for its own contribution", c.name)
				acts = s.Contribute(0, pe.Idx(0), c.reducer, cb, c.own, nil)
			}
			require.Len(t, acts, 1, c.name)
			require.Equal(t, RedDeliver, acts[0].Op, c.name)
			require.Equal(t, c.kept, acts[0].Result, c.name)
			require.Equal(t, cb, acts[0].Partial.CB, c.name)
		}
	}
	// with no contributor of its own, the result completes the round
	s := NewReduction(-1, []int{1})
	s.AddChildCount(1, 0, 1, nil)
	s.Enable(nil)
	acts := s.Child(1, &Partial{Red: 0, Reducer: testIntSum, CB: cb, Count: 1, Complete: true, Result: int64(9)}, nil)
	require.Len(t, acts, 1)
	require.Equal(t, int64(9), acts[0].Result)
	require.Equal(t, cb, acts[0].Partial.CB)
}

// Under message logging a partial leaves with its PE's own values listed
// apart, and none of its items Reusable by whoever folds it (a log may
// send it again); when the log releases the message the reducer's
// Recycle gets those values back, once. A reducer without Recycle lists
// nothing.
func TestLoggedPartialsGiveTheirOwnValuesBackOnRelease(t *testing.T) {
	var got []any
	id := RegisterReducer(&Reducer{
		Name:    "test.fsum.recycled",
		Fold:    LookupReducer(testFloatSum).Fold,
		Codec:   MsgpackCodec[float64](),
		Recycle: func(v any) { got = append(got, v) },
	})
	items := func() []Item {
		return []Item{{Key: pe.Idx(0), Value: 1.0, own: true}, {Key: pe.Idx(1), Value: 2.0}, {Key: pe.Idx(2), Value: 3.0, own: true}}
	}
	p := &Partial{Reducer: id, Items: items()}
	owned := p.handOver(LookupReducer(id), true)
	require.Equal(t, []any{1.0, 3.0}, owned)
	for _, it := range p.Items {
		require.False(t, it.Reusable(), "%v", it.Key)
	}
	m := &Manager{}
	env := &pe.Envelope{Type: tPartial, Kind: pe.KindReduction, Payload: &PartialMsg{p: p, owned: owned}}
	m.logReleased(env)
	require.Equal(t, []any{1.0, 3.0}, got)
	m.logReleased(env)
	require.Len(t, got, 2, "released twice, recycled once")

	plain := &Partial{Reducer: testFloatSum, Items: items()}
	require.Nil(t, plain.handOver(LookupReducer(testFloatSum), true))
	require.False(t, plain.Items[0].Reusable())

	// a log that keeps it until the checkpoint: nothing is listed, and
	// Detach may swap this PE's values for copies
	var detached []pe.Index
	kept := RegisterReducer(&Reducer{
		Name:    "test.fsum.detached",
		Fold:    LookupReducer(testFloatSum).Fold,
		Codec:   MsgpackCodec[float64](),
		Recycle: func(v any) { t.Fatal("recycled a value a log keeps") },
		Detach: func(items []Item) {
			for i, it := range items {
				if it.Reusable() {
					detached = append(detached, it.Key)
					items[i].Value = it.Value.(float64) + 10
				}
			}
		},
	})
	q := &Partial{Reducer: kept, Items: items()}
	require.Nil(t, q.handOver(LookupReducer(kept), false))
	require.Equal(t, []pe.Index{pe.Idx(0), pe.Idx(2)}, detached)
	require.Equal(t, []any{11.0, 2.0, 13.0}, []any{q.Items[0].Value, q.Items[1].Value, q.Items[2].Value})
	require.False(t, q.Items[0].Reusable() || q.Items[2].Reusable())
}
