package chare

// Go's profiles of a run (--cpuprofile, --memprofile, --trace-go), one
// set per process.

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	gotrace "runtime/trace"
	"strconv"
	"time"

	"github.com/charmgo/charmgo/pe/cluster"
)

// usageSample is how often the usage sampler looks at the PEs (the
// summary's utilisation): often enough for runs of a second, seldom
// enough to cost nothing on a 2-core machine.
const usageSample = 5 * time.Millisecond

// profileFile is path, with ".N" for rank N when the job has several
// processes.
func profileFile(path string, job *cluster.Job) string {
	if job == nil {
		return path
	}
	return path + "." + strconv.Itoa(job.Rank())
}

// startProfiles starts what cfg asks for and returns the function that
// stops them and writes the heap profile.
func startProfiles(cfg Config, job *cluster.Job) (stop func() error, err error) {
	var closers []func() error
	stop = func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		if cfg.MemProfile != "" {
			errs = append(errs, writeHeap(profileFile(cfg.MemProfile, job)))
		}
		return errors.Join(errs...)
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(profileFile(cfg.CPUProfile, job))
		if err != nil {
			return stop, fmt.Errorf("flag --cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return stop, fmt.Errorf("flag --cpuprofile: %w", err)
		}
		closers = append(closers, func() error { pprof.StopCPUProfile(); return f.Close() })
	}
	if cfg.GoTrace != "" {
		f, err := os.Create(profileFile(cfg.GoTrace, job))
		if err != nil {
			return stop, fmt.Errorf("flag --trace-go: %w", err)
		}
		if err := gotrace.Start(f); err != nil {
			f.Close()
			return stop, fmt.Errorf("flag --trace-go: %w", err)
		}
		closers = append(closers, func() error { gotrace.Stop(); return f.Close() })
	}
	return stop, nil
}

func writeHeap(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("flag --memprofile: %w", err)
	}
	runtime.GC() // the heap as the run left it, not as the last GC saw it
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("flag --memprofile %s: %w", path, err)
	}
	return f.Close()
}
