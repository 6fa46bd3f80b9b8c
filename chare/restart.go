package chare

import (
	"fmt"

	"github.com/charmgo/charmgo/manager"
	"github.com/vmihailenco/msgpack/v5"
)

// loadCheckpoint reads the last complete checkpoint in dir, one snapshot
// per PE, checks that it is this program's, and places its elements on
// pes PEs (redistributing them if the checkpoint was taken on another
// count or with other trees). It returns each PE's encoded snapshot, the
// checkpoint's epoch, and where each snapshot came from (for errors).
func loadCheckpoint(dir string, pes, branching int, main *typeInfo) ([][]byte, uint64, []string, error) {
	latest, err := manager.ReadLatest(dir)
	if err != nil {
		return nil, 0, nil, err
	}
	old := int(latest.NumPEs)
	snaps, decoded, err := manager.ReadSnapshots(dir, latest)
	if err != nil {
		return nil, 0, nil, err
	}
	if err := manager.CheckCheckpoint(decoded); err != nil {
		return nil, 0, nil, fmt.Errorf("checkpoint %d in %s: %w", latest.Epoch, dir, err)
	}
	for p, s := range decoded {
		file := manager.SnapshotFile(dir, latest.Epoch, p)
		for _, c := range s.Collections {
			ti := lookupType(c.Type)
			if c.Kind == manager.CollMain && c.Name != main.name {
				return nil, 0, nil, fmt.Errorf("%s is a checkpoint of %s, this program runs %s", dir, c.Name, main.name)
			}
			if ti == nil || ti.name != c.Name {
				return nil, 0, nil, fmt.Errorf("%s: collection %d holds chares of type %s, which this program does not define the same way", file, c.Coll, c.Name)
			}
		}
	}
	from := make([]string, pes)
	if old == pes && int(decoded[0].Branching) == branching {
		for p := range from {
			from[p] = manager.SnapshotFile(dir, latest.Epoch, p)
		}
		return snaps, latest.Epoch, from, nil
	}
	// another PE count (or other trees): every element finds a new place
	moved, err := manager.Redistribute(decoded, pes, branching)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("restarting the %d-PE checkpoint in %s on %d PEs: %w", old, dir, pes, err)
	}
	out := make([][]byte, pes)
	for p, s := range moved {
		if out[p], err = msgpack.Marshal(s); err != nil {
			return nil, 0, nil, err
		}
		from[p] = fmt.Sprintf("checkpoint %d in %s (its %d PEs' snapshots placed on %d)", latest.Epoch, dir, old, pes)
	}
	return out, latest.Epoch, from, nil
}
