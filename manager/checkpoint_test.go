package manager

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func TestDecodeSnapshotNamesWhatIsWrong(t *testing.T) {
	good := PESnapshot{Version: SnapshotVersion, PE: 1, NumPEs: 2, Epoch: 3, Collections: []CollSnapshot{
		{CreateMsg: CreateMsg{Coll: 1, Name: "a", Bounds: []int{2, 2}}, Elements: []ElemSnapshot{{Index: []int32{1, 0}, State: []byte{1}}}},
		{CreateMsg: CreateMsg{Coll: 4, Name: "b"}},
	}}
	enc := func(s PESnapshot) []byte {
		b, err := msgpack.Marshal(&s)
		require.NoError(t, err)
		return b
	}
	s, err := DecodeSnapshot(enc(good))
	require.NoError(t, err)
	require.Equal(t, good.Collections[0].Elements, s.Collections[0].Elements)

	for _, c := range []struct {
		name string
		edit func(*PESnapshot)
		err  string
	}{
		{"version", func(s *PESnapshot) { s.Version = 9 }, "checkpoint version 9, this build reads 2"},
		{"location", func(s *PESnapshot) { s.Collections[0].Locs = []LocSnapshot{{Index: []int32{0, 1}, PE: 5}} }, "collection 1 (a), location 0: index [0 1] on PE 5"},
		{"rounds", func(s *PESnapshot) { s.Sections = []SectionMsg{{Sec: 9, Tree: []int{0}, K: 2}} }, "1 sections but 0 section rounds"},
		{"section tree", func(s *PESnapshot) {
			s.Sections, s.SecRounds = []SectionMsg{{Sec: 9, Tree: []int{0, 3}, K: 2}}, []uint32{0}
		}, "section 9: tree PE 3 outside 0..1"},
		{"PE", func(s *PESnapshot) { s.PE = 2 }, "checkpoint of PE 2 in a run of 2 PEs"},
		{"PEs", func(s *PESnapshot) { s.NumPEs = 0 }, "checkpoint of 0 PEs"},
		{"dims", func(s *PESnapshot) { s.Collections[0].Elements[0].Index = []int32{1} }, "collection 1 (a), element 0: index [1] for bounds [2 2]"},
		{"order", func(s *PESnapshot) { s.Collections[1].Coll = 1 }, "collection 1 listed after 1"},
	} {
		bad := good
		bad.Collections = []CollSnapshot{good.Collections[0], good.Collections[1]}
		bad.Collections[0].Elements = []ElemSnapshot{good.Collections[0].Elements[0]}
		c.edit(&bad)
		_, err := DecodeSnapshot(enc(bad))
		require.ErrorContains(t, err, c.err, c.name)
	}
	_, err = DecodeSnapshot([]byte("not msgpack at all"))
	require.ErrorContains(t, err, "not a charmgo checkpoint (18 bytes)")
}

// FuzzDecodeSnapshot: checkpoint files come from disk; any bytes give a
// snapshot that passes the checks, or an error, never a panic.
func FuzzDecodeSnapshot(f *testing.F) {
	b, _ := msgpack.Marshal(&PESnapshot{Version: SnapshotVersion, PE: 0, NumPEs: 1, Collections: []CollSnapshot{
		{CreateMsg: CreateMsg{Coll: 1, Bounds: []int{3}}, Elements: []ElemSnapshot{{Index: []int32{2}, State: []byte("x")}}}}})
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeSnapshot(data)
		if err != nil {
			return
		}
		require.Equal(t, uint8(SnapshotVersion), s.Version)
		require.Less(t, s.PE, s.NumPEs)
	})
}

func TestRedistributeRefusesWhatCannotMove(t *testing.T) {
	snap := func(p int32, kind CollKind, round uint32) *PESnapshot {
		return &PESnapshot{Version: SnapshotVersion, PE: p, NumPEs: 2, Epoch: 1, Collections: []CollSnapshot{
			{CreateMsg: CreateMsg{Coll: 1, Kind: kind, Name: "c"}, RedNext: round, Elements: []ElemSnapshot{{Index: []int32{p}}}}}}
	}
	_, err := Redistribute([]*PESnapshot{snap(0, CollGroup, 0), snap(1, CollGroup, 0)}, 3, 2, nil)
	require.ErrorContains(t, err, "c is a group (one member per PE): it cannot be restarted on 3 PEs instead of 2")
	_, err = Redistribute([]*PESnapshot{snap(0, CollArray, 4), snap(1, CollArray, 5)}, 3, 2, nil)
	require.ErrorContains(t, err, "c: reduction round 5 on PE 1, 4 on PE 0")

	// a 1D array of 2 elements on 2 PEs, moved to 3: each element once,
	// every PE knows where all are, counts follow the elements
	a, b := snap(0, CollArray, 2), snap(1, CollArray, 2)
	a.Collections[0].Bounds, b.Collections[0].Bounds = []int{2}, []int{2}
	out, err := Redistribute([]*PESnapshot{a, b}, 3, 2, nil)
	require.NoError(t, err)
	var elems, locs int
	var counted int64
	for _, s := range out {
		c := s.Collections[0]
		elems += len(c.Elements)
		locs += len(c.Locs)
		counted += c.RedLocal
		require.Equal(t, uint32(2), c.RedNext)
		require.Len(t, c.Elements, int(c.RedLocal))
		require.Equal(t, 2, len(c.Elements)+len(c.Locs))
	}
	require.Equal(t, 2, elems)
	require.Equal(t, 4, locs)
	require.Equal(t, int64(2), counted)
	require.Equal(t, []int64{1, 0}, out[0].Collections[0].RedChildren, "PE 1's subtree holds element 1")
}
