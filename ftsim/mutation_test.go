package ftsim

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A mutation is a bug put into the protocol's code on purpose: the
// simulations must fail with it.
type mutation struct {
	name, file, from, to string
}

var mutations = []mutation{
	{"replay order: a recorded reception delivered out of its turn", "ftlayer/causal.go",
		"	if r, ok := s.recorded[s.key(m)]; ok {\n		return r == s.rsn+1\n	}",
		"	if _, ok := s.recorded[s.key(m)]; ok {\n		return true\n	}"},
	{"duplicate detection: a point-to-point message seen before is not dropped", "ftlayer/causal.go",
		"	return m.Inc < s.incMap[m.Sender] || s.recv[m.Sender].has(m.CSN), nil\n}",
		"	return m.Inc < s.incMap[m.Sender], nil\n}"},
	{"a keeper's window: only results past the last one kept are kept", "ftlayer/hops.go",
		"	if m.Inc < s.incMap[m.Sender] || st.kept.has(m.Num) {",
		"	if m.Inc < s.incMap[m.Sender] || m.Num <= st.kept.contig || len(st.kept.extra) > 0 {"},
	{"ack batching: a node acknowledges the determinants it only passes up the tree", "ftlayer/causal.go",
		"	case len(m.Dets) > 0 && m.Sender != s.me && s.passesDetsUp(m):\n		s.stashUp(m.Dets)\n",
		"	case len(m.Dets) > 0 && m.Sender != s.me && s.passesDetsUp(m):\n		s.stashUp(m.Dets)\n		out = s.ackDets(m, out)\n"},
	{"CAMEL: the determinants a partial's copy carries are dropped with it", "ftlayer/causal.go",
		"	if !s.keepsResults() || m.Kind != KindReduction || isResult(m) || len(m.Dets) == 0 || m.Sender == s.me || m.Inc != s.incMap[m.Sender] {",
		"	if true || !s.keepsResults() || m.Kind != KindReduction || isResult(m) || len(m.Dets) == 0 || m.Sender == s.me || m.Inc != s.incMap[m.Sender] {"},
	{"CAMEL: a partial's copy from an old incarnation passes its determinants on", "ftlayer/causal.go",
		"len(m.Dets) == 0 || m.Sender == s.me || m.Inc != s.incMap[m.Sender] {",
		"len(m.Dets) == 0 || m.Sender == s.me {"},
	{"a log limit: the rollback set leaves out the PEs that stopped logging to the failed one", "recovery/gate.go",
		"set, chain := mcml.Rollback(n, fs, func(z, y int) bool {\n\t\treturn g.off[z][y] || teams.Same(int32(z), int32(y))",
		"set, chain := mcml.Rollback(n, fs, func(z, y int) bool {\n\t\treturn teams.Same(int32(z), int32(y))"},
	{"a log limit: a PE rolled back without failing forgets its receptions' order", "ftlayer/limit.go",
		"		for _, d := range k.own {",
		"		for _, d := range k.own[:0] {"},
	{"a log limit: a PE rolled back without failing forgets the determinants it held for others", "ftlayer/limit.go",
		"		s.detLog, s.inherited = k.detLog, len(k.detLog)\n",
		"		_ = k.detLog\n"},
	{"a log limit: a PE rolled back without failing takes the determinants it kept as stored when they come again", "ftlayer/causal.go",
		"		for _, d := range s.detLog[s.inherited:] {",
		"		for _, d := range s.detLog {"},
	{"a log limit: a keeper rolled back without failing forgets the results it kept for roots", "ftlayer/limit.go",
		"		for _, m := range k.results {\n",
		"		for _, m := range k.results[:0] {\n"},
	{"a log limit: a root rolled back without failing tells its fellows what its keeper may not hold", "ftlayer/limit.go",
		"(d.asRoot && keeperFailed || d.asKeeper",
		"(d.asRoot && (keeperFailed || true) || d.asKeeper"},
	{"a log limit: a rolled-back root's multicast reaches a PE rolled back without failing only down the tree", "ftlayer/limit.go",
		"y != s.me && s.rb.has(y) && s.coll.t.Has(m.Group, y)",
		"y != s.me && s.rb.failed[y] && s.coll.t.Has(m.Group, y)"},
	{"a log limit: a rolled-back root's multicast reaches a PE rolled back without failing below a failed parent only down the tree", "ftlayer/limit.go",
		"s.rb.has(p) && (!s.rb.failed[p] || !s.rb.failed[y]) {",
		"s.rb.has(p) && !s.rb.failed[p] {"},
	{"a log limit: a rolled-back root's multicast reaches a failed PE only down the tree", "ftlayer/hops.go",
		"	if role == RoleMcastRoot && s.camel && s.rb != nil && s.recovering {",
		"	if false {"},
	{"a log limit: the runtime of a restarted PE hears only some of the completions its protocol hears", "ftlayer/hook.go",
		"	if len(h.s.completed) > 0 && h.complete != nil {",
		"	if false && len(h.s.completed) > 0 && h.complete != nil {"},
	{"a restarted PE takes the incarnations of its checkpoint for its peers' now", "ftlayer/causal.go",
		"		s.peerIncarnation(p.From, p.Inc)\n",
		"\n"},
	{"pessimist: a restarted PE delivers in any order", "ftlayer/pessimist.go",
		"	if pos > s.upTo {",
		"	if true {"},
	{"pessimist: only events are committed, not how far a run went", "ftlayer/pessimist.go",
		"	if s.rsn > s.committed {\n		if len(s.pending) == 0 && s.runFrom == to {",
		"	if len(s.pending) > 0 {\n		if len(s.pending) == 0 && s.runFrom == to {"},
	{"pessimist: a survivor keeps to itself the count a send without a commit left with it", "ftlayer/pessimist.go",
		"		end.Covered = s.heldFor[y]",
		"		_ = s.heldFor[y]"},
	{"pessimist: nothing reaches the event logger", "ftlayer/pessimist.go",
		"		if err := h.events.Commit(h.s.me, commit.Events, commit.Covered, commit.Others); err != nil {",
		"		if err := error(nil); err != nil {"},
	{"a log limit: a keeper acknowledges a reduction it only heard was complete", "ftlayer/causal.go",
		"s.keeper(r.Group) == s.me && st.kept.has(r.Num) {",
		"s.keeper(r.Group) == s.me {"},
	{"a log limit: a root rolled back without failing leaves its failed keeper without its results", "ftlayer/limit.go",
		"	if r.failed[y] {\n		// (the trees",
		"	if false && r.failed[y] {\n		// (the trees"},
	{"a log limit: a PE rolled back without failing keeps its order to itself", "ftlayer/limit.go",
		"	if r.asked || len(r.own) == 0 {",
		"	if true || r.asked || len(r.own) == 0 {"},
	{"a log limit: the order a rolled-back PE had stored is lost with the PE storing it", "ftlayer/limit.go",
		"	if o := s.ownStored; o != nil && o.at == y && len(o.dets) > 0 {",
		"	if o := s.ownStored; false && o != nil && o.at == y && len(o.dets) > 0 {"},
	{"a log limit: a PE keeps its rollback set after recovering, and takes the next failure for part of it", "ftlayer/causal.go",
		"		// a later failure of a fellow is another failure\n		s.rb = nil\n",
		"\n"},
}

// TestMutationsFailTheSimulations builds the simulations with each
// mutation in turn (go test -overlay: the tree is left alone) and
// requires them to fail, with the sweeps in full (FT_LONG: at the
// default stride some PE/event pairs are left out, and bugs that only
// they reach go unseen). It takes about an hour, so it runs when
// FTSIM_MUTATIONS=1 is set:
//
//	FTSIM_MUTATIONS=1 go test -timeout 2h -run Mutations -v ./ftsim
func TestMutationsFailTheSimulations(t *testing.T) {
	if os.Getenv("FTSIM_MUTATIONS") == "" {
		t.Skip("set FTSIM_MUTATIONS=1 to build and run the simulations with each mutation")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	for _, mu := range mutations {
		t.Run(mu.name, func(t *testing.T) {
			path := filepath.Join(root, mu.file)
			src, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, 1, strings.Count(string(src), mu.from), "the mutation no longer applies to %s: update it", mu.file)
			dir := t.TempDir()
			mutated := filepath.Join(dir, filepath.Base(mu.file))
			require.NoError(t, os.WriteFile(mutated, []byte(strings.Replace(string(src), mu.from, mu.to, 1)), 0o644))
			overlay, err := json.Marshal(map[string]map[string]string{"Replace": {path: mutated}})
			require.NoError(t, err)
			ov := filepath.Join(dir, "overlay.json")
			require.NoError(t, os.WriteFile(ov, overlay, 0o644))
			cmd := exec.Command("go", "test", "-overlay="+ov, "-count=1", "-run", "Failures", "./ftsim")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "FT_LONG=1")
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "the simulations passed with the mutation:\n%s", out)
			require.NotContains(t, string(out), "build failed", "the mutation does not build:\n%s", out)
			for _, line := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "--- FAIL") {
					t.Log(strings.TrimSpace(line))
				}
			}
		})
	}
}
