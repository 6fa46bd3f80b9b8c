// Package testbuild builds this module's programs for tests that run them
// as processes (charmrun's, charmscale's): each program once per test
// binary, into a temporary directory removed when the tests end.
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
	builds sync.Map // package → *build
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
	v, _ := p.builds.LoadOrStore(pkg, &build{})
	b := v.(*build)
	b.once.Do(func() {
		b.path = filepath.Join(p.dir, name)
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
