// Package summaries runs a charmgo program for the bench tools (mcmltable,
// eventtable) and reads the summary it writes (--summary-json), and says
// whether two runs computed the same.
package summaries

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Result is one of a run's results, as its summary holds it.
type Result struct {
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
}

// Run runs bin with args and flags, writing its summary in dir, and
// decodes the summary into into (the part of chare.Summary the caller
// reads). A run that fails is an error with the last lines it printed.
func Run(bin, dir string, args, flags []string, into any) error {
	js := filepath.Join(dir, "summary.json")
	cmd := exec.Command(bin, append(append(append([]string{}, args...), flags...), "--summary-json", js, "--watchdog", "60s")...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		return fmt.Errorf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(append(args, flags...), " "), err,
			strings.Join(lines[max(len(lines)-5, 0):], "\n"))
	}
	b, err := os.ReadFile(js)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

// Same reports whether two runs' results named so that compared says
// yes are equal, bit for bit (JSON prints a float64 in the fewest digits
// that read back as the same bits), and how many it compared.
func Same(a, b []Result, compared func(name string) bool) (same bool, n int) {
	of := func(rs []Result) map[string]string {
		out := map[string]string{}
		for _, r := range rs {
			if compared(r.Name) {
				out[r.Name] = string(r.Value)
			}
		}
		return out
	}
	x, y := of(a), of(b)
	if len(x) != len(y) {
		return false, len(x)
	}
	for k, v := range x {
		if y[k] != v {
			return false, len(x)
		}
	}
	return true, len(x)
}
