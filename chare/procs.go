package chare

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
	"github.com/charmgo/charmgo/pe/cluster"
	"github.com/charmgo/charmgo/recovery"
)

// launcherEnv are the rank and size variables of the launchers a job may
// run under, in the order they are looked for: charmrun's
// (cluster.Launch), then srun's, mpirun's and a PMI launcher's.
var launcherEnv = [][2]string{
	{cluster.RankEnv, cluster.ProcsEnv},
	{"SLURM_PROCID", "SLURM_NTASKS"},
	{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
	{"PMI_RANK", "PMI_SIZE"},
}

// launcher reads this process's rank and the job's number of processes
// from the first launcher whose variables are set (0, 0: none is).
func launcher(getenv func(string) string) (rank, procs int, from string, err error) {
	for _, v := range launcherEnv {
		r, n := getenv(v[0]), getenv(v[1])
		if r == "" && n == "" {
			continue
		}
		rank, err1 := strconv.Atoi(r)
		procs, err2 := strconv.Atoi(n)
		if err1 != nil || err2 != nil || procs < 1 || rank < 0 || rank >= procs {
			return 0, 0, "", fmt.Errorf("environment: %s=%q and %s=%q are not a rank and a number of processes", v[0], r, v[1], n)
		}
		return rank, procs, v[0], nil
	}
	return 0, 0, "", nil
}

// JobIDEnv names a job for --rendezvous-dir when the launcher gives no
// id of its own: every process of the job must see the same, and no two
// jobs at once.
const JobIDEnv = "CHARMGO_JOB_ID"

// jobID is the launcher's id of this job (its step, under srun).
func jobID(getenv func(string) string) string {
	if id := getenv("SLURM_JOB_ID"); id != "" {
		if step := getenv("SLURM_STEP_ID"); step != "" {
			return id + "." + step
		}
		return id
	}
	for _, v := range []string{"OMPI_MCA_ess_base_jobid", JobIDEnv} {
		if id := getenv(v); id != "" {
			return strings.Map(func(r rune) rune {
				if r == '/' || r == os.PathSeparator {
					return '_'
				}
				return r
			}, id)
		}
	}
	return ""
}

// layout settles +p (PEs in all), ++n (processes) and ++ppn (PEs per
// process): any two give the third, and all three must agree. A launcher's
// size stands for ++n.
func layout(pes, procs, ppn int, launched int) (int, int, int, error) {
	if launched > 0 {
		if procs > 0 && procs != launched {
			return 0, 0, 0, fmt.Errorf("flag ++n %d: the launcher started %d processes", procs, launched)
		}
		procs = launched
	}
	switch {
	case pes > 0 && procs > 0 && ppn > 0:
		if pes != procs*ppn {
			return 0, 0, 0, fmt.Errorf("flags +p %d, ++n %d, ++ppn %d: %d processes of %d PEs are %d PEs, not %d", pes, procs, ppn, procs, ppn, procs*ppn, pes)
		}
	case pes > 0 && procs > 0:
		if pes%procs != 0 {
			return 0, 0, 0, fmt.Errorf("flags +p %d, ++n %d: %d PEs do not split evenly over %d processes (give ++ppn)", pes, procs, pes, procs)
		}
		ppn = pes / procs
	case pes > 0 && ppn > 0:
		if pes%ppn != 0 {
			return 0, 0, 0, fmt.Errorf("flags +p %d, ++ppn %d: %d PEs are not a whole number of processes of %d", pes, ppn, pes, ppn)
		}
		procs = pes / ppn
	case procs > 0:
		if ppn == 0 {
			ppn = 1 // as Charm++'s non-SMP build: a PE per process
		}
		pes = procs * ppn
	case ppn > 0:
		procs, pes = 1, ppn
	default:
		return pes, 1, pes, nil
	}
	if pes > MaxPEs {
		return 0, 0, 0, fmt.Errorf("%d PEs: at most %d", pes, MaxPEs)
	}
	return pes, procs, ppn, nil
}

// Layout settles +p, ++n and ++ppn as a program does (0: not given), for
// launchers: the PEs in all (0 if none was given and there is one
// process), the processes and the PEs per process.
func Layout(pes, procs, ppn int) (int, int, int, error) { return layout(pes, procs, ppn, 0) }

// newLogger is the run's logger: zap at the level asked for (warn by
// default: quiet unless something is wrong), on standard error.
func newLogger(level string) (*zap.Logger, error) {
	if level == "" {
		level = "warn"
	}
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("flag --log-level: %q: want debug, info, warn or error", level)
	}
	enc := zap.NewDevelopmentEncoderConfig()
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), lvl)
	return zap.New(core), nil
}

// joinJob meets the job's other processes (cfg.Procs > 1).
func joinJob(cfg *Config, log *zap.Logger) (*cluster.Job, error) {
	rank, procs, _, err := launcher(os.Getenv)
	if err != nil {
		return nil, InputError{err}
	}
	if procs == 0 {
		return nil, InputError{fmt.Errorf("++n %d: this process has no rank: start the job with charmrun, or under srun or mpirun (which set SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK)", cfg.Procs)}
	}
	if procs != cfg.Procs {
		return nil, InputError{fmt.Errorf("++n %d: the launcher started %d processes", cfg.Procs, procs)}
	}
	v := os.Getenv(cluster.SecretEnv)
	if v == "" {
		return nil, InputError{fmt.Errorf("several processes need the job's secret in %s (charmrun sets it; under srun, export one: openssl rand -hex 32)", cluster.SecretEnv)}
	}
	secret, err := cluster.ParseSecret(v)
	if err != nil {
		return nil, InputError{fmt.Errorf("%s: %w", cluster.SecretEnv, err)}
	}
	inc := 0
	if v := os.Getenv(cluster.ReplacementEnv); v != "" {
		if inc, err = strconv.Atoi(v); err != nil || inc < 0 {
			return nil, InputError{fmt.Errorf("environment: %s=%q is not an incarnation number", cluster.ReplacementEnv, v)}
		}
	}
	var rv cluster.Rendezvous
	switch {
	case os.Getenv(cluster.CharmrunEnv) != "":
		rv = &cluster.Charmrun{Addr: os.Getenv(cluster.CharmrunEnv), Secret: secret, Rank: rank, Inc: inc}
	case cfg.Rendezvous != "":
		rv = cluster.FixedAddress(cfg.Rendezvous)
	case cfg.RendezvousDir != "":
		id := jobID(os.Getenv)
		if id == "" {
			return nil, InputError{fmt.Errorf("flag --rendezvous-dir: no job id to name the rendezvous file after: none of SLURM_JOB_ID, OMPI_MCA_ess_base_jobid, %s is set", JobIDEnv)}
		}
		rv = cluster.Directory{Dir: cfg.RendezvousDir, Job: id}
	default:
		return nil, InputError{fmt.Errorf("process %d of %d: no rendezvous: give --rendezvous HOST:PORT (process 0 listens there) or --rendezvous-dir DIR (a directory every host sees), or start with charmrun", rank, procs)}
	}
	actorLog := zap.NewNop()
	if log.Core().Enabled(zapcore.DebugLevel) {
		actorLog = log // protoactor-go's chatter only when debugging
	}
	connect := cfg.ConnectTimeout
	if _, ok := rv.(*cluster.Charmrun); ok {
		// charmrun bounds the start itself, and says which process did
		// not join: a process waiting on another gives up a little after
		// it, not at the same moment with a line of its own
		connect = cmp.Or(connect, cluster.DefaultConnectTimeout) + 5*time.Second
	}
	job, err := cluster.Join(cluster.Config{Rank: rank, Procs: procs, PEs: cfg.PEs, Secret: secret, Host: cfg.Listen,
		Rendezvous: rv, ConnectTimeout: connect, HeartbeatTimeout: cfg.HeartbeatTimeout, Types: pe.TypesDigest(), Log: log, ActorLog: actorLog, Incarnation: inc})
	if err != nil {
		return nil, fmt.Errorf("process %d of %d: %w", rank, procs, err)
	}
	if c, ok := rv.(*cluster.Charmrun); ok {
		job.EndWith(c.Gone(), "charmrun is gone")
	}
	return job, nil
}

// PeerError ends the run in every process of a job when one process
// ended it with an error, or was lost.
type PeerError = cluster.PeerError

// ReportedElsewhere reports whether err is another process's error that
// that process prints itself: the others exit with its code and say
// nothing more, so a job's failure is told once.
func ReportedElsewhere(err error) bool {
	var pe *PeerError
	return errors.As(err, &pe) && !pe.Lost
}

// processResult is what a process sends process 0 at the end, for the
// job's statistics.
type processResult struct {
	First   int             `msgpack:"f"`
	PEs     []pe.Stats      `msgpack:"p"`
	PEOps   []manager.Stats `msgpack:"po"` // by local PE (the run's Ops are their sum)
	Log     []ftlayer.Stats `msgpack:"l"`
	Usage   []pe.Usage      `msgpack:"u,omitempty"`  // the usage sampler's, by local PE
	Steps   []stepTime      `msgpack:"st,omitempty"` // the steps begun here
	Results []SummaryResult `msgpack:"rs,omitempty"` // reported here (Report)
	// Steered: the recoveries this process steered, when it took over
	// from a lost process 0 (nil: it did not); process 0's replacement
	// knows none of them
	Steered *recovery.Stats `msgpack:"sd,omitempty"`
	// Cost: what the process held and exchanged to be in the job
	Cost ProcessCost `msgpack:"c"`
}

// ProcessCost is what a process of a job held and exchanged to be in it:
// its peak memory (resident set), the data links it held up at the end,
// and the control messages it sent and received over the run (of them
// heartbeats), for scaling experiments.
type ProcessCost struct {
	PeakRSSBytes       uint64  `msgpack:"m" json:"peak_rss_bytes"`
	Seconds            float64 `msgpack:"s" json:"seconds"` // from the start of the run to its end here
	DataLinks          int     `msgpack:"dl" json:"data_links"`
	ControlSent        uint64  `msgpack:"cs" json:"control_sent"`
	ControlReceived    uint64  `msgpack:"cr" json:"control_received"`
	HeartbeatsSent     uint64  `msgpack:"hs" json:"heartbeats_sent"`
	HeartbeatsReceived uint64  `msgpack:"hr" json:"heartbeats_received"`
}

// Process is one process of the job, for the run's summary.
type Process struct {
	Rank, FirstPE, PEs int
	Host               string
	Cost               ProcessCost
}

// ProcessSummary says how many processes ran and how many PEs each held.
func ProcessSummary(ps []Process) string {
	if len(ps) <= 1 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d processes:", len(ps))
	for i, p := range ps {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %d PEs (%d..%d) on %s", p.PEs, p.FirstPE, p.FirstPE+p.PEs-1, p.Host)
	}
	return b.String()
}

// peakRSS is this process's largest resident set so far, in bytes (0
// where the system does not say).
func peakRSS() uint64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil || ru.Maxrss < 0 {
		return 0
	}
	return uint64(ru.Maxrss) * 1024 // kilobytes, on Linux
}

func encodeResult(r processResult) []byte {
	b, err := msgpack.Marshal(&r)
	if err != nil {
		return nil
	}
	return b
}

func decodeResult(b []byte) (processResult, error) {
	var r processResult
	err := pe.UnmarshalMsgpack(b, &r)
	return r, err
}
