package ftlayer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// karyTree is PE i's parent (i-1)/k: a spanning tree over n PEs rooted
// at PE 0, as the manager's tree over every PE is in one process.
type karyTree struct{ n, k int }

func (t karyTree) Parent(p int) int { return (p - 1) / t.k }

func (t karyTree) Children(p int, dst []int) []int {
	for c := p*t.k + 1; c <= p*t.k+t.k && c < t.n; c++ {
		dst = append(dst, c)
	}
	return dst
}

// checkpointers makes n PEs' checkpointers on tree, each holding its
// neighbour's initial copy.
func checkpointers(n int, b Buddies, tree PETree) []*Checkpointer {
	cks := make([]*Checkpointer, n)
	for i := range cks {
		cks[i] = NewCheckpointer(int32(i), b, tree, &Snapshot{Owner: int32(i)})
		cks[i].Hold(&Snapshot{Owner: b.Held(int32(i))})
	}
	return cks
}

// ckptRun is an epoch's run: the PEs in the order they committed, each
// PE's packets, and the number of copies stored when the coordinator
// decided.
type ckptRun struct {
	committed       []int32
	sent            map[int32][]Packet
	storedAtDecided int
}

// runEpoch delivers an epoch's packets in an order rng picks.
func runEpoch(t *testing.T, cks []*Checkpointer, epoch uint64, rng *rand.Rand) ckptRun {
	t.Helper()
	r := ckptRun{sent: map[int32][]Packet{}}
	var inFlight []Packet
	stored := 0
	collect := func(from int32, acts []Action) {
		for _, a := range acts {
			switch a.Kind {
			case ActSend:
				if a.Packet.Kind == PktCkptCommit && a.Packet.To == 0 {
					r.storedAtDecided = stored
				}
				r.sent[from] = append(r.sent[from], a.Packet)
				inFlight = append(inFlight, a.Packet)
			case ActCommitted:
				r.committed = append(r.committed, from)
			}
		}
	}
	for i, c := range cks {
		collect(int32(i), c.Begin(epoch, &Snapshot{App: []byte{byte(i)}}))
	}
	for len(inFlight) > 0 {
		k := rng.IntN(len(inFlight))
		p := inFlight[k]
		inFlight = slices.Delete(inFlight, k, k+1)
		acts, err := cks[p.To].Receive(&p)
		require.NoError(t, err)
		if p.Kind == PktCkptData {
			stored++
		}
		collect(p.To, acts)
	}
	return r
}

// The commit is decided once every PE stored the copy it holds, and
// every notice travels the tree over every PE: a PE tells its parent
// once, and hears the commit from it; whatever the order of delivery.
func TestCheckpointOverTheTree(t *testing.T) {
	for _, c := range []struct{ n, k, stride int }{
		{1, 2, 1}, {2, 2, 1}, {5, 2, 1}, {16, 4, 1}, {33, 8, 4}, {64, 2, 8},
	} {
		t.Run(fmt.Sprintf("%d PEs, branching %d, stride %d", c.n, c.k, c.stride), func(t *testing.T) {
			b := NewBuddies(c.n, c.stride)
			tree := karyTree{c.n, c.k}
			cks := checkpointers(c.n, b, tree)
			rng := rand.New(rand.NewPCG(uint64(c.n), uint64(c.k)))
			for epoch := uint64(1); epoch <= 3; epoch++ {
				r := runEpoch(t, cks, epoch, rng)
				require.Len(t, r.committed, c.n)
				require.Equal(t, int32(0), r.committed[0], "the coordinator commits first")
				require.Equal(t, c.n, r.storedAtDecided, "decided once every copy was stored")
				for p := int32(0); int(p) < c.n; p++ {
					kids := tree.Children(int(p), nil)
					var want []Packet
					want = append(want, Packet{Kind: PktCkptData, To: b.Of(p)})
					if p == 0 {
						want = append(want, Packet{Kind: PktCkptCommit, To: 0})
					} else {
						want = append(want, Packet{Kind: PktCkptStored, To: int32(tree.Parent(int(p)))})
					}
					for _, k := range kids {
						want = append(want, Packet{Kind: PktCkptCommit, To: int32(k)})
					}
					var got []Packet
					for _, s := range r.sent[p] {
						require.Equal(t, p, s.From)
						require.Equal(t, epoch, s.Ckpt.Epoch)
						got = append(got, Packet{Kind: s.Kind, To: s.To})
					}
					require.ElementsMatch(t, want, got, "PE %d's packets", p)
					require.Equal(t, epoch, cks[p].LastCommitted())
					require.False(t, cks[p].InProgress())
					require.Equal(t, []byte{byte(p)}, cks[p].Committed(p).App)
					require.Equal(t, []byte{byte(b.Held(p))}, cks[p].Committed(b.Held(p)).App, "PE %d holds its neighbour's copy", p)
				}
				require.Equal(t, epoch, cks[0].Decided())
			}
		})
	}
}

// Packets that do not fit the tree or the pairs are refused, naming
// them; a notice said twice counts once; an aborted epoch leaves no
// trace in the next.
func TestCheckpointNoticesFromStrangers(t *testing.T) {
	const n = 7
	b, tree := NewBuddies(n, 1), karyTree{n, 2}
	cks := checkpointers(n, b, tree)
	for i, c := range cks {
		c.Begin(1, &Snapshot{App: []byte{byte(i)}})
	}
	_, err := cks[1].Receive(&Packet{Kind: PktCkptStored, From: 5, To: 1, Ckpt: &CkptMsg{Epoch: 1}})
	require.ErrorContains(t, err, "PE 1: checkpoint 1: a stored notice from PE 5, not a child of its")
	_, err = cks[3].Receive(&Packet{Kind: PktCkptCommit, From: 0, To: 3, Ckpt: &CkptMsg{Epoch: 1}})
	require.ErrorContains(t, err, "PE 3: checkpoint 1: a commit from PE 0, not its parent")
	_, err = cks[3].Receive(&Packet{Kind: PktCkptData, From: 5, To: 3, Ckpt: &CkptMsg{Epoch: 1, Snap: &Snapshot{Owner: 5}}})
	require.ErrorContains(t, err, "PE 3: checkpoint 1: given PE 5's snapshot, it holds PE 2's")
	_, err = cks[3].Receive(&Packet{Kind: PktCkptData, From: 2, To: 3, Ckpt: &CkptMsg{Epoch: 1}})
	require.ErrorContains(t, err, "without its snapshot")

	// PE 1 (children 3 and 4) stored its copy; child 3 says so twice
	acts, err := cks[1].Receive(&Packet{Kind: PktCkptData, From: 0, To: 1, Ckpt: &CkptMsg{Epoch: 1, Snap: &Snapshot{Owner: 0, Epoch: 1}}})
	require.NoError(t, err)
	require.Empty(t, acts)
	for range 2 {
		acts, err = cks[1].Receive(&Packet{Kind: PktCkptStored, From: 3, To: 1, Ckpt: &CkptMsg{Epoch: 1}})
		require.NoError(t, err)
		require.Empty(t, acts, "child 4 has not said")
	}
	acts, err = cks[1].Receive(&Packet{Kind: PktCkptStored, From: 4, To: 1, Ckpt: &CkptMsg{Epoch: 1}})
	require.NoError(t, err)
	require.Equal(t, []Action{{Kind: ActSend, Packet: Packet{Kind: PktCkptStored, From: 1, To: 0, Ckpt: &CkptMsg{Epoch: 1}}}}, acts)

	// every PE aborts; epoch 2 completes as if 1 never began
	for _, c := range cks {
		c.Abort()
	}
	acts, err = cks[1].Receive(&Packet{Kind: PktCkptStored, From: 3, To: 1, Ckpt: &CkptMsg{Epoch: 1}})
	require.NoError(t, err)
	require.Empty(t, acts, "from the aborted epoch")
	r := runEpoch(t, cks, 2, rand.New(rand.NewPCG(1, 2)))
	require.Len(t, r.committed, n)
	require.Equal(t, n, r.storedAtDecided)
}
