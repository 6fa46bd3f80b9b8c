package manager

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func TestDecodeSnapshotNamesWhatIsWrong(t *testing.T) {
	good := PESnapshot{Version: SnapshotVersion, PE: 1, NumPEs: 2, Branching: 4, Epoch: 3, Collections: []CollSnapshot{
		{CreateMsg: CreateMsg{Coll: 1, Kind: CollArray, Name: "a", Bounds: []int{2, 2}}, Elements: []ElemSnapshot{{Index: []int32{1, 0}, State: []byte{1}}}},
		{CreateMsg: CreateMsg{Coll: 4, Kind: CollArray, Name: "b"}},
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
		{"version", func(s *PESnapshot) { s.Version = 9 }, "checkpoint version 9, this build reads 4"},
		{"location", func(s *PESnapshot) { s.Collections[0].Locs = []LocSnapshot{{Index: []int32{0, 1}, PE: 5}} }, "collection 1 (a): location 0: index [0 1] on PE 5"},
		{"rounds", func(s *PESnapshot) { s.Sections = []SectionMsg{{Sec: 9, Tree: []int{0}, K: 2}} }, "1 sections but 0 section rounds"},
		{"section tree", func(s *PESnapshot) {
			s.Sections, s.SecRounds = []SectionMsg{{Sec: 9, Coll: 1, Tree: []int{0, 3}, K: 2, Members: []pe.Index{pe.Idx(0, 0)}, Homes: []int32{0}}}, []uint32{0}
		}, "section 9: tree PE 3 outside 0..1"},
		{"section member", func(s *PESnapshot) {
			s.Sections, s.SecRounds = []SectionMsg{{Sec: 9, Coll: 1, Tree: []int{1}, K: 2, Members: []pe.Index{pe.Idx(2, 0)}, Homes: []int32{1}}}, []uint32{0}
		}, "section 9: member 0: index [2 0] outside bounds [2 2]"},
		{"PE", func(s *PESnapshot) { s.PE = 2 }, "checkpoint of PE 2 in a run of 2 PEs"},
		{"PEs", func(s *PESnapshot) { s.NumPEs = 0 }, "checkpoint of 0 PEs"},
		{"arity", func(s *PESnapshot) { s.Branching = 1 }, "spanning trees of arity 1"},
		{"dims", func(s *PESnapshot) { s.Collections[0].Elements[0].Index = []int32{1} }, "collection 1 (a): element 0: index [1] for bounds [2 2]"},
		{"bounds", func(s *PESnapshot) { s.Collections[0].Elements[0].Index = []int32{1, 2} }, "collection 1 (a): element 0: index [1 2] outside bounds [2 2]"},
		{"kind", func(s *PESnapshot) { s.Collections[1].Kind = 9 }, "collection 4 (b): kind 9"},
		{"huge", func(s *PESnapshot) { s.Collections[1].Bounds = []int{1 << 20, 1 << 20} }, "more than 2147483648 elements"},
		{"counts", func(s *PESnapshot) { s.Collections[1].RedChildren = []int64{3} }, "0 contributors here and 1 subtree counts, for 0 tree children"},
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
// Rate here (go test -fuzz, 2 workers, 10 s): about 35,000 inputs a second.
func FuzzDecodeSnapshot(f *testing.F) {
	b, _ := msgpack.Marshal(&PESnapshot{Version: SnapshotVersion, PE: 0, NumPEs: 1, Branching: 4, Collections: []CollSnapshot{
		{CreateMsg: CreateMsg{Coll: 1, Kind: CollArray, Bounds: []int{3}}, Elements: []ElemSnapshot{{Index: []int32{2}, State: []byte("x")}}}}})
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

// FuzzReadLatest: LATEST comes from disk; any bytes give a marker whose
// counts are in range and consistent, or an error naming the file, never
// a panic or an allocation its counts ask for.
// Rate here (go test -fuzz, 2 workers, 10 s): about 2,500 inputs a second
// (each input is a file written and read).
func FuzzReadLatest(f *testing.F) {
	good, _ := msgpack.Marshal(&Latest{Epoch: 3, NumPEs: 2, Files: []FileRecord{{Size: 10, CRC: 1}, {Size: 12, CRC: 2}}})
	huge, _ := msgpack.Marshal(&Latest{Epoch: 3, NumPEs: 1 << 30})
	for _, p := range [][]byte{good, huge, {}, []byte("x")} {
		f.Add(append(fileHeader(kindLatest, p), p...))
	}
	f.Add([]byte("CHGOCKPT"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "LATEST"), data, 0o644))
		l, err := ReadLatest(dir)
		if err != nil {
			require.Contains(t, err.Error(), dir)
			return
		}
		require.Positive(t, l.Epoch)
		require.True(t, l.NumPEs >= 1 && l.NumPEs <= MaxCheckpointPEs)
		require.Len(t, l.Files, int(l.NumPEs))
	})
}

// Location records that send an element's messages round a cycle are
// refused; stale ones that lead to the element are not.
func TestCheckCheckpointRefusesLocationCycles(t *testing.T) {
	snap := func(p int32, elems []ElemSnapshot, locs []LocSnapshot) *PESnapshot {
		s := &PESnapshot{Version: SnapshotVersion, PE: p, NumPEs: 3, Branching: 4, Epoch: 1, Collections: []CollSnapshot{
			{CreateMsg: CreateMsg{Coll: 1, Kind: CollArray, Name: "s", Sparse: true, Map: MapHash}, Elements: elems, Locs: locs}}}
		if p == 0 {
			s.Resume = &Callback{}
		}
		return s
	}
	ix := pe.Idx(7)
	home := (&Collection{Kind: CollArray, Map: MapHash}).Home(ix, 3)
	other := (home + 1) % 3
	third := (home + 2) % 3
	at := func(p int, locs map[int]int32) []*PESnapshot {
		out := make([]*PESnapshot, 3)
		for q := range out {
			var elems []ElemSnapshot
			if q == p {
				elems = []ElemSnapshot{{Index: []int32{7}}}
			}
			var l []LocSnapshot
			if to, ok := locs[q]; ok {
				l = []LocSnapshot{{Index: []int32{7}, PE: to}}
			}
			out[q] = snap(int32(q), elems, l)
		}
		return out
	}
	// the element on `third`; its home knows; a stale cache on `other`
	// points to the home: fine
	require.NoError(t, CheckCheckpoint(at(third, map[int]int32{home: int32(third), other: int32(home)})))
	// the home points to `other`, which points back to the home: a cycle
	err := CheckCheckpoint(at(third, map[int]int32{home: int32(other), other: int32(home)}))
	require.ErrorContains(t, err, "the location records of element [7] lead from PE")
}

// A snapshot of another version is refused by its version, whatever
// fields it has that this one does not.
func TestSnapshotOfAnotherVersionIsRefusedByVersion(t *testing.T) {
	old := map[string]any{"Version": 3, "PE": 0, "NumPEs": 1, "FT": map[string]any{"Groups": []map[string]any{{"ID": 1, "Contributed": 4}}}}
	b, err := msgpack.Marshal(old)
	require.NoError(t, err)
	_, err = DecodeSnapshot(b)
	require.EqualError(t, err, fmt.Sprintf("checkpoint version 3, this build reads %d", SnapshotVersion))
}

// A PE whose subtree of a collection's reduction tree held no
// contributor at the checkpoint completed no round: its reduction number
// lags the others' and says nothing (a sparse array's leaf without
// elements); one that held contributors and lags is refused.
func TestCheckCheckpointAcceptsAPEThatTookNoPartInReductions(t *testing.T) {
	snap := func(p int32, next uint32, local int64) *PESnapshot {
		s := &PESnapshot{Version: SnapshotVersion, PE: p, NumPEs: 2, Branching: 4, Epoch: 1, Collections: []CollSnapshot{
			{CreateMsg: CreateMsg{Coll: 1, Kind: CollArray, Name: "s", Sparse: true, Map: MapHash}, RedNext: next, RedLocal: local}}}
		if p == 0 {
			s.Resume = &Callback{}
			s.Collections[0].RedChildren = []int64{local}
		}
		return s
	}
	require.NoError(t, CheckCheckpoint([]*PESnapshot{snap(0, 3, 0), snap(1, 0, 0)}), "PE 1 reduced nothing")
	require.ErrorContains(t, CheckCheckpoint([]*PESnapshot{snap(0, 3, 0), snap(1, 2, 1)}), "PE 1's snapshot defines collection 1 (s) otherwise than PE 0's")
}

type ignoreAll struct{}

func (ignoreAll) Handle(*pe.PE, *pe.Envelope) {}

// A holder that restarted since the checkpoint, and had not had its
// neighbour's copy back when the neighbour was lost, says so: an empty
// answer would start the neighbour again from the start of the run while
// the others go on from the checkpoint, a wrong result.
func TestRecoverMsgNamesACopyNotHeld(t *testing.T) {
	node, err := pe.NewNode(pe.Config{NumPEs: 4}, func(*pe.PE) pe.Handler { return ignoreAll{} })
	require.NoError(t, err)
	b := ftlayer.NewBuddies(4, 1)
	y := b.Held(1) // the PE whose copy PE 1 holds
	own := &ftlayer.Snapshot{Owner: 1, Epoch: 3, App: []byte{1}}
	tests := []struct {
		name        string
		held        *ftlayer.Snapshot
		base        uint64
		wantOwn     bool
		missingFrom int32
	}{
		{"the copy held", &ftlayer.Snapshot{Owner: y, Epoch: 3, App: []byte{2}}, 0, true, 0},
		{"the copy not held", nil, 0, false, 2},
		{"no checkpoint since the run's base: y starts from its own", nil, 3, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &Manager{PE: node.PE(1)}
			m.rec.base = tt.base
			m.ckpt.ck = ftlayer.RestoredCheckpointer(1, b, nil, own, tt.held)
			rm := m.ownRecoverMsg(y)
			require.Equal(t, tt.wantOwn, rm.Own != nil)
			require.Equal(t, tt.missingFrom, rm.MissingFrom)
		})
	}
}

// A PE's description of what it waits for (a stall's report) names a
// section whose collection it does not know, instead of failing on it.
func TestPendingNamesASectionOfAnUnknownCollection(t *testing.T) {
	node, err := pe.NewNode(pe.Config{NumPEs: 2}, func(*pe.PE) pe.Handler { return ignoreAll{} })
	require.NoError(t, err)
	m := &Manager{PE: node.PE(1), host: nothingPending{}, secs: map[uint64]*Section{5: {ID: 5, Coll: 9}}}
	require.Equal(t, []string{"section 5 of collection 9, which PE 1 does not know"}, m.Pending())
}

// nothingPending is a host with no unfinished work of its own (the rest
// of Host is never called here).
type nothingPending struct{ Host }

func (nothingPending) Pending(*Manager) []string { return nil }
