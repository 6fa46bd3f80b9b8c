package chare

import (
	"fmt"

	"github.com/charmgo/charmgo/manager"
	"github.com/vmihailenco/msgpack/v5"
)

// loadCheckpoint reads the last complete checkpoint in dir, one snapshot
// per PE, checks that it is this program's, and places its elements on
// pes PEs (redistributing them if the checkpoint was taken on another
// count or with other trees). It returns each PE's encoded snapshot and
// the checkpoint's epoch.
func loadCheckpoint(dir string, pes, branching int, main *typeInfo) ([][]byte, uint64, error) {
	latest, err := manager.ReadLatest(dir)
	if err != nil {
		return nil, 0, err
	}
	old := int(latest.NumPEs)
	snaps, decoded, err := readSnapshots(dir, latest.Epoch, old)
	if err != nil {
		return nil, 0, err
	}
	for p, s := range decoded {
		file := manager.SnapshotFile(dir, latest.Epoch, p)
		for _, c := range s.Collections {
			ti := lookupType(c.Type)
			if c.Kind == manager.CollMain && c.Name != main.name {
				return nil, 0, fmt.Errorf("%s is a checkpoint of %s, this program runs %s", dir, c.Name, main.name)
			}
			if ti == nil || ti.name != c.Name {
				return nil, 0, fmt.Errorf("%s: collection %d holds chares of type %s, which this program does not define the same way", file, c.Coll, c.Name)
			}
		}
	}
	if decoded[0].Resume == nil {
		return nil, 0, fmt.Errorf("%s: PE 0's snapshot has no callback to resume with", manager.SnapshotFile(dir, latest.Epoch, 0))
	}
	if old == pes && int(decoded[0].Branching) == branching {
		return snaps, latest.Epoch, nil
	}
	// another PE count (or other trees): every element finds a new place
	moved, err := manager.Redistribute(decoded, pes, branching, mapFns)
	if err != nil {
		return nil, 0, fmt.Errorf("restarting the %d-PE checkpoint in %s on %d PEs: %w", old, dir, pes, err)
	}
	out := make([][]byte, pes)
	for p, s := range moved {
		if out[p], err = msgpack.Marshal(s); err != nil {
			return nil, 0, err
		}
	}
	return out, latest.Epoch, nil
}

// readCheckpointFiles reads checkpoint epoch of a run of n PEs from dir
// (a rollback finds there what no surviving PE holds).
func readCheckpointFiles(dir string, epoch uint64, n int) ([][]byte, error) {
	latest, err := manager.ReadLatest(dir)
	if err != nil {
		return nil, err
	}
	if latest.Epoch != epoch || int(latest.NumPEs) != n {
		return nil, fmt.Errorf("%s holds checkpoint %d of %d PEs, not checkpoint %d of %d", dir, latest.Epoch, latest.NumPEs, epoch, n)
	}
	snaps, _, err := readSnapshots(dir, epoch, n)
	return snaps, err
}

// readSnapshots reads and checks the n snapshot files of epoch in dir.
func readSnapshots(dir string, epoch uint64, n int) ([][]byte, []*manager.PESnapshot, error) {
	snaps := make([][]byte, n)
	decoded := make([]*manager.PESnapshot, n)
	for p := range snaps {
		file := manager.SnapshotFile(dir, epoch, p)
		b, s, err := manager.ReadSnapshotFile(file)
		if err != nil {
			return nil, nil, err
		}
		if int(s.PE) != p || s.Epoch != epoch || int(s.NumPEs) != n {
			return nil, nil, fmt.Errorf("%s holds PE %d of %d, epoch %d: want PE %d of %d, epoch %d", file, s.PE, s.NumPEs, s.Epoch, p, n, epoch)
		}
		snaps[p], decoded[p] = b, s
	}
	return snaps, decoded, nil
}
