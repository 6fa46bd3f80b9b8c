package chare

import (
	"fmt"

	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/recovery"
)

// loadCheckpoint reads the last complete checkpoint in dir for a run of
// pes PEs (recovery.LoadCheckpoint), refusing one of another program or
// whose chare types this program does not define the same way.
func loadCheckpoint(dir string, pes, branching, procs int, main *typeInfo) (recovery.Restart, error) {
	return recovery.LoadCheckpoint(dir, pes, branching, procs, func(file string, s *manager.PESnapshot) error {
		for _, c := range s.Collections {
			ti := lookupType(c.Type)
			if c.Kind == manager.CollMain && c.Name != main.name {
				return fmt.Errorf("%s is a checkpoint of %s, this program runs %s", dir, c.Name, main.name)
			}
			if ti == nil || ti.name != c.Name {
				return fmt.Errorf("%s: collection %d holds chares of type %s, which this program does not define the same way", file, c.Coll, c.Name)
			}
		}
		return nil
	})
}
