package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// From a user's own module that imports charmgo, charmscale needs gonum's
// plotting packages, which the user's program does not: a plain `go run`
// of it stops at a missing go.sum entry, and the command docs/SCALING.md
// gives instead runs it.
func TestCharmscaleRunsFromAUsersModule(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "SCALING.md"))
	require.NoError(t, err)
	const documented = "go run -mod=mod github.com/charmgo/charmgo/cmd/charmscale"
	require.Contains(t, string(doc), documented)

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/heat\n\ngo 1.26\n\nrequire github.com/charmgo/charmgo v0.0.0\n\nreplace github.com/charmgo/charmgo => "+root+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

import "github.com/charmgo/charmgo/chare"

type Main struct{}

var mainType = chare.NewMainType[Main]("heat.Main")

func (*Main) Init(ctx *chare.Ctx, _ []string) { ctx.Exit(0) }

func main() { chare.Main(mainType) }
`), 0o644))
	gocmd := func(args ...string) (string, error) {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := gocmd("mod", "tidy")
	require.NoError(t, err, out)
	out, err = gocmd("run", "github.com/charmgo/charmgo/cmd/charmscale", "--help")
	require.Error(t, err, "the plain run found plot's go.sum entries: the documented workaround is not needed any more?\n%s", out)
	require.Contains(t, out, "missing go.sum entry for module providing package gonum.org/v1/plot")
	out, err = gocmd(append(strings.Fields(documented)[1:], "--help")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "usage: charmscale")
	out, err = gocmd("run", "github.com/charmgo/charmgo/cmd/charmscale", "--help")
	require.NoError(t, err, "once added, a plain run works:\n%s", out)
}
