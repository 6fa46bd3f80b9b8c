// Package testbuild builds this module's programs for tests that run them
// as processes (charmrun's, charmscale's): each program once per test
// binary (and once more with the race detector, where asked), into a
// temporary directory removed when the tests end.
package testbuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Programs is a test binary's builds.
type Programs struct {
	dir    string
	builds sync.Map // the program's name → *build
}

type build struct {
	once sync.Once
	path string
	err  error
}

// Run runs m's tests with p's directory, then removes it; a TestMain
// calls it and exits with its code.
func Run(m *testing.M, p **Programs) int {
	dir, err := os.MkdirTemp("", "charmgo-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*p = &Programs{dir: dir}
	return m.Run()
}

// Build builds package pkg (a path as go build takes it, from the test's
// directory) as name, once; a failed build fails t with go build's output.
func (p *Programs) Build(t testing.TB, pkg, name string) string {
	t.Helper()
	return p.build(t, pkg, name)
}

// BuildRace is Build with the race detector: for the few runs of a
// program whose processes' own concurrency the tests look at (a test
// binary under -race sees only its own).
func (p *Programs) BuildRace(t testing.TB, pkg, name string) string {
	t.Helper()
	return p.build(t, pkg, name+".race", "-race")
}

func (p *Programs) build(t testing.TB, pkg, name string, flags ...string) string {
	t.Helper()
	v, _ := p.builds.LoadOrStore(name, &build{})
	b := v.(*build)
	b.once.Do(func() {
		b.path = filepath.Join(p.dir, name)
		args := append(append([]string{"build"}, flags...), "-o", b.path, pkg)
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go %v: %v\n%s", args, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
