package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// maxTrackedBytes is the largest file the repository may track: binaries
// and data sets do not belong in it (a built program once went in,
// 24.9 MB, although .gitignore listed it).
const maxTrackedBytes = 1_000_000

// errNotACheckout says the suite runs outside a git checkout (a copy of
// the tree): there is no list of tracked files to check.
var errNotACheckout = errors.New("not a git checkout")

// oversizedTracked lists the files git tracks under root that are larger
// than maxTrackedBytes, each with its size; errNotACheckout where root is
// not in a git checkout.
func oversizedTracked(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || errors.Is(err, exec.ErrNotFound) {
			return nil, fmt.Errorf("%w: git ls-files: %v %s", errNotACheckout, err, bytes.TrimSpace(stderr.Bytes()))
		}
		return nil, err
	}
	var big []string
	for _, name := range bytes.Split(out, []byte{0}) {
		if len(name) == 0 {
			continue
		}
		st, err := os.Lstat(filepath.Join(root, string(name)))
		if err != nil || !st.Mode().IsRegular() {
			continue // removed from the work tree and not yet from the index, or a link
		}
		if st.Size() > maxTrackedBytes {
			big = append(big, fmt.Sprintf("%s (%.1f MB)", name, float64(st.Size())/1e6))
		}
	}
	return big, nil
}
