package chare

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/ftlayer/mcml"
	"github.com/charmgo/charmgo/ftlayer/teams"
	"github.com/charmgo/charmgo/loadbalance"
	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
	"github.com/charmgo/charmgo/pe/cluster"
	"github.com/charmgo/charmgo/recovery"
)

// Config is a run's runtime settings; ParseFlags fills it from the command
// line.
type Config struct {
	PEs       int  // number of PEs (default GOMAXPROCS)
	WireCheck bool // encode every message with msgpack, even in process
	// FTVerify checks every recovery: a PE re-executing after a failure
	// must send what it sent the first time (--ft-verify).
	FTVerify bool
	// WrapHook, if set, wraps each PE's fault-tolerance hook: a tool that
	// watches what the protocol sees (ftsim's check that elements send
	// the same messages in every order) puts itself around it, embedding
	// ftlayer.Wrapper. t is what the hook is given about the PE's trees
	// and messages (it implements ftlayer.Origins).
	WrapHook  func(me int, h ftlayer.Hook, t ftlayer.Trees) ftlayer.Hook
	Branching int // spanning-tree arity (default 4)
	// Balancer is the load-balancing strategy at AtSync (loadbalance.New's
	// names, Charm++'s too); several separated by commas chain as several
	// +balancer flags do: the first at the first step, the next after.
	// "" or "none": no balancing.
	Balancer string
	// Strategies are the program's own load-balancing strategies, which
	// Balancer names by their Name() as it names the built-ins (a
	// program's takes the name's place if a built-in has it too). Like
	// the built-ins they run on PE 0 and must plan from the stats alone.
	Strategies []loadbalance.Strategy
	// LBDebug prints a report per balancing step (1; 2 adds the bytes
	// between PEs). LBDump writes every step's stats to a file that
	// cmd/lbreplay reads. LBCPUTime balances by the CPU time entry
	// methods took (each PE on a thread of its own) instead of their wall
	// time; LBOff measures nothing. LBPeriod balances every so often
	// without AtSync. LBTolerance is the imbalance the strategies accept
	// (default 0.03).
	LBDebug     int
	LBDump      string
	LBCPUTime   bool
	LBOff       bool
	LBPeriod    time.Duration
	LBTolerance float64
	// SpinPolls is the most polls an idle PE makes before it parks (it
	// adapts how long it spins to how soon its messages come: pe.Config).
	// 0: DefaultSpinPolls where every PE has a core (the process no more
	// PEs than GOMAXPROCS, its host no more than it has cores) and not in
	// a test binary, else none; negative: never.
	SpinPolls int
	// CheckpointDir, if set, receives every committed checkpoint (besides
	// the two copies in memory).
	CheckpointDir string
	// Restart, if set, resumes the run from the last complete checkpoint
	// in this directory instead of constructing the main chare; on another
	// PE count than the checkpoint's, its elements are redistributed.
	Restart string
	// CkptSteps and CkptEvery are the checkpoint cadence the program is
	// asked for (--ckpt-period: every so many steps, or at the first step
	// boundary after so much time); programs read it with
	// CheckpointPeriod. Zero: the program's own.
	CkptSteps int
	CkptEvery time.Duration
	// Kills are failures to inject (--kill, --kill-file): each happens
	// once, fail-stop. Under FT none every PE rolls back to the last
	// checkpoint; under scmel and camel the failed PE alone does.
	Kills []Kill
	// FT is the message-logging protocol: "none" (the default:
	// checkpoint/restart alone), "scmel", "camel", "team" or
	// "pessimist".
	FT string
	// Teams groups the PEs for team-based logging (--ft team, or camel
	// as camel+teams): "N" (consecutive blocks of N PEs), "process"
	// (each process's PEs; the default with several processes under
	// team) or "auto" (chosen at each coordinated checkpoint from the
	// traffic between PEs measured since the one before, by Algorithm 1
	// of papers/001 with its cost function (2); every PE alone until the
	// second checkpoint; one process).
	Teams string
	// TeamsAlpha and TeamsBeta weigh logging and rollback in --teams
	// auto's cost (α·L + β·R; defaults 0.23 and 0.124).
	TeamsAlpha, TeamsBeta float64
	// LogLimit bounds each PE's message log, in bytes (--log-limit; 0:
	// unbounded), under scmel, camel and team: memory-constrained message
	// logging (MCML, papers/002). Past it a PE stops logging on the
	// channel LogLimitStrategy chooses, and a failure of that channel's
	// receiver rolls it back too.
	LogLimit uint64
	// LogLimitStrategy chooses that channel: "heaviest" (the default:
	// the channel whose logged messages take the most bytes).
	LogLimitStrategy string
	// Notices receives one line per failure and recovery (default: none).
	Notices io.Writer
	// Watchdog ends the run with exit code 3 and a dump of every PE once
	// no PE made progress for this long (0: DefaultWatchdog, or
	// TestWatchdog in a test binary; negative: never).
	Watchdog time.Duration
	// DumpTo receives the dump SIGQUIT asks for (default: standard error).
	DumpTo io.Writer
	// Stdout is where the program's chares print (Ctx.Out; default:
	// standard output).
	Stdout io.Writer
	// TransportChaos, if not zero, seeds a transport that holds messages
	// between PEs back for random short times, reordering them across
	// channels (each channel stays FIFO), as between processes: a program
	// counting on causal order across three PEs shows it in process
	// (--transport-chaos SEED; the environment variable
	// CHARMGO_TRANSPORT_CHAOS gives it to every run that sets none, so
	// whole test suites run under it).
	TransportChaos uint64
	// Deterministic runs every PE on the calling goroutine, one event at a
	// time, in an interleaving chosen by Seed (pe.Config.Deterministic):
	// simulations run the runtime itself this way and fail PEs before
	// any event or after any message a PE hands over (Kill.Event,
	// Kill.HandOver). MaxEvents bounds such a run (0: none).
	Deterministic bool
	Seed          uint64
	MaxEvents     int
	// Procs is how many OS processes the job's PEs are spread over
	// (Charm++'s ++n; PPN, ++ppn, is PEs per process): each process runs
	// an equal block of the PEs, numbered in the whole job. With several,
	// this process's rank comes from its launcher (charmrun, srun,
	// mpirun), and it meets the others through a rendezvous: charmrun's,
	// Rendezvous (HOST:PORT, where process 0 listens) or RendezvousDir (a
	// directory every host sees).
	Procs, PPN     int
	Rendezvous     string
	RendezvousDir  string
	Listen         string        // address to listen on (default 127.0.0.1: loopback only)
	ConnectTimeout time.Duration // bound on the job's start (default 60s)
	// HeartbeatTimeout: a process silent for so long is taken for hung and
	// the job ends (default 30s).
	HeartbeatTimeout time.Duration
	LogLevel         string // debug, info, warn (default) or error
	// Trace, if set, records every PE's timeline and writes it there as
	// a page (FILE.html) or Chrome's trace events (FILE.json): trace.go.
	Trace string
	// ProgressLine: "on" shows the live progress line under the program's
	// output (progress.go) in the process of PE 0, "off" never, "" or
	// "auto" when its output is a terminal.
	ProgressLine string
	// SummaryJSON, if set, is where the process of PE 0 writes the run's
	// Summary as JSON (--summary-json).
	SummaryJSON string
	// CPUProfile, MemProfile and GoTrace, if set, are where each process
	// writes Go's CPU profile, its heap profile at the end and its
	// execution trace (--cpuprofile, --memprofile, --trace-go); with
	// several processes each adds ".N", N its rank.
	CPUProfile, MemProfile, GoTrace string
	// Args is the program's positional arguments (the flags taken out).
	Args []string
	// ProgramFlags is the program's own flags as they were given (a flag
	// and its value as two words, or -name=value as one), for the
	// summary and the trace, which record the program's line: Args
	// alone would leave out what a program takes through MainWith.
	ProgramFlags []string
}

// programLine is the program's part of its command line: its own flags
// as given, then its arguments.
func (cfg *Config) programLine() []string { return slices.Concat(cfg.ProgramFlags, cfg.Args) }

// MaxPEs is the most PEs a job runs, as Charm++'s +p allows. What a PE
// holds for the PEs it talks to is made when it first does (pe's
// outboxes, in chunks), and the spanning tree over every PE is computed,
// not listed, so a PE of a large job costs about 30 KB (hello +p16384 in
// one process: 0.5 GB).
const MaxPEs = 16384

// ErrHelp is returned by ParseFlags when --help was asked for.
var ErrHelp = errors.New("help requested")

// RuntimeUsage lists the runtime flags every charmgo program accepts.
const RuntimeUsage = `runtime flags (every charmgo program):
  +p N, --pes N          number of PEs (default: GOMAXPROCS = %d)
  --wire-check           encode every message with msgpack, even within the process
  --ft-verify            check every recovery: a PE re-executing after a
                         failure must send what it sent the first time, or
                         the run ends naming the message (a program whose
                         entries are not deterministic)
  --branching K          spanning-tree arity for reductions and multicasts (default 4)
  +balancer NAME, --lb NAME
                         load balancer at AtSync (none by default): greedy, refine,
                         greedyrefine, graph, random, rotate, dummy, or Charm++'s
                         GreedyLB, RefineLB, GreedyRefineLB, MetisLB, RandCentLB,
                         RotateLB, DummyLB; given twice, the first runs at the first
                         step and the second at every step after
  +LBDebug N             print each balancing step's PE load max/avg before,
                         predicted after and measured after, moves, times (N 2:
                         bytes between PEs too)
  +LBDump FILE           write every step's stats to FILE (go run ./cmd/lbreplay)
  +LBUseCpuTime          balance by the CPU time of entry methods, not their wall
                         time (each PE runs on an OS thread of its own)
  +LBOff                 measure nothing (the balancer sees no load)
  +LBPeriod SECONDS      balance every SECONDS without AtSync (--ft none only)
  +LBTolerance F         imbalance the strategies accept (default 0.03)
  --spin N|auto          idle PEs poll up to N times before parking, fewer if
                         their messages come late (auto: 65536, about 30 µs,
                         where every PE has a core, else 0; 0: never)
  --ckpt-period N|T      checkpoint every N steps, or at the first step after
                         time T since the last (30s, 1m30s; --ft none only)
                         in programs that checkpoint (LeanMD)
  --ckpt-dir DIR         also write every committed checkpoint to DIR
  --restart DIR          resume from the last complete checkpoint in DIR, on
                         any PE count (the program's arguments are ignored)
  --ft none|scmel|camel|team|pessimist|spmd
                         message logging: none (default; a failure rolls every
                         PE back), scmel (simple causal), camel (collective-
                         aware), team (team-based: messages inside a team are
                         not logged, and a failure rolls back the failed PE's
                         team), pessimist (each determinant stored before its
                         message is delivered) or spmd (team logging without
                         determinants, for send-deterministic programs;
                         docs/SPMD.md)
  --teams N|process|auto teams for --ft team and spmd (and camel: camel+teams): blocks of
                         N consecutive PEs, each process's PEs (the default
                         with several processes under team), or auto: chosen at
                         each checkpoint from the traffic measured since the one
                         before (papers/001's Algorithm 1; one process)
  --teams-alpha A, --teams-beta B
                         --teams auto's cost weights: A·logged share + B·rollback
                         share (defaults 0.23, 0.124)
  --log-limit SIZE       bound each PE's message log (64M, 512K; scmel, camel, team):
                         past it the PE stops logging on a channel,
                         and a failure of its receiver rolls the PE back too
                         (memory-constrained message logging, papers/002)
  --log-limit-strategy heaviest|cluster
                         the channel to stop logging on: heaviest (default: the
                         one whose logged messages take the most bytes), or
                         cluster (the heaviest to the nearest cluster of PEs
                         in a dendrogram of the traffic, rebuilt at each
                         checkpoint)
  --kill PE@STEP, --kill PE@TIME
                         inject a failure: PE fails when the program begins
                         STEP (chare.AtStep), or TIME after the start (2.5s,
                         300ms: any program)
  --kill-file F          failures from F: lines "PE SECONDS" (Charm++'s +killFile)
                         or "PE @STEP". Under --ft none every PE rolls back to
                         the last checkpoint; under scmel and camel the failed
                         PE alone does, and the others replay its messages
  --transport-chaos SEED hold messages between PEs back for random short
                         times (seeded), reordering them across channels as
                         between processes; each channel stays FIFO
  --watchdog D           end a run in which no PE runs an entry method for D
                         (10s, 2m; default 10m; 0: never) with exit code 3
                         and a dump of every PE's state; SIGQUIT prints the
                         same dump and the run goes on
  ++n K                  spread the PEs over K processes (with +p N: N/K PEs
                         each; ++ppn M: M PEs each): under charmrun, srun or
                         mpirun, which start the processes
  ++ppn M                PEs per process (any two of +p, ++n, ++ppn give the third)
  --rendezvous HOST:PORT process 0 listens there and the others meet it
                         (under srun or mpirun; charmrun needs none)
  --rendezvous-dir DIR   meet through a file in DIR, a directory every host sees
  --listen HOST          address the job listens on (default 127.0.0.1: this
                         machine only; 0.0.0.0: each process on its host's own
                         address, for a real cluster)
  --connect-timeout D    every process must have joined within D (default 60s)
  --heartbeat-timeout D  a process silent for D is taken for hung: under
                         charmrun it is killed and replaced, else the job
                         ends (default 30s)
  --trace FILE.html|FILE.json
                         record every PE's timeline (entry methods, waits,
                         balancing, checkpoints, recovery) and write it as
                         a page to open in a browser (.html: lanes, usage,
                         time per entry) or as Chrome's trace events
                         (.json: Perfetto); process 0 gathers the others'
  --progress-line auto|on|off
                         one live line under the program's output: the step,
                         ms/step and the time left, rewritten as steps begin
                         (auto, the default: when the output is a terminal)
  --summary-json FILE    write the run's summary as JSON (schema
                         charmgo.summary/1: chare.Summary) to FILE
  --cpuprofile FILE, --memprofile FILE, --trace-go FILE
                         write Go's CPU profile, heap profile (at the end) or
                         execution trace of the run to FILE; with several
                         processes each writes FILE.N, N its rank
  --log-level L          debug, info, warn (default) or error
  --help                 this text
`

// runtimeFlags are the runtime's flags by every spelling ParseFlags takes,
// each with whether it takes a value (+pN's value may also be attached).
var runtimeFlags = map[string]bool{
	"+p": true, "--pes": true, "-pes": true, "--wire-check": false, "--ft-verify": false, "--branching": true,
	"+balancer": true, "--lb": true, "--balancer": true, "--spin": true,
	"+LBDebug": true, "+LBDump": true, "+LBUseCpuTime": false, "+LBOff": false, "+LBPeriod": true, "+LBTolerance": true,
	"--ckpt-period": true, "+ckptPeriod": true, "--ckpt-dir": true, "--ft": true, "+ft": true, "--teams": true, "--teams-alpha": true, "--teams-beta": true, "--log-limit": true, "--log-limit-strategy": true,
	"--kill": true, "--kill-file": true, "+killFile": true, "--watchdog": true, "--transport-chaos": true,
	"--restart": true, "+restart": true, "++n": true, "++ppn": true, "--rendezvous": true, "--rendezvous-dir": true,
	"--listen": true, "--connect-timeout": true, "--heartbeat-timeout": true, "--log-level": true,
	"--summary-json": true, "--cpuprofile": true, "--memprofile": true, "--trace-go": true, "--progress-line": true, "--trace": true,
}

// looksLikeFlag reports whether a is a dash, or two, then a letter: a
// flag's spelling, where "-3" and "-.5" are numbers.
func looksLikeFlag(a string) bool {
	rest := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	if len(rest) == len(a) || rest == "" {
		return false
	}
	c := rest[0]
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// RuntimeFlag reports whether name (with its dashes or plus, without
// "=value") is one of the runtime's flags, and whether it takes a value:
// launchers pass such flags on to the program.
func RuntimeFlag(name string) (known, takesValue bool) {
	if strings.HasPrefix(name, "+p") && len(name) > 2 {
		return true, false // +p4: its value attached
	}
	v, ok := runtimeFlags[name]
	return ok, v
}

// Flag is a program's own command-line flag, parsed next to the runtime's.
type Flag struct {
	Name  string // with its dashes: "--progress"
	Arg   string // the value's name in the usage ("N"); empty for a boolean flag
	Usage string
	Set   func(value string) error // value is "" for a boolean flag
	// boolValue: a boolean flag that also takes -name=value (Go's flag
	// package's booleans: -v=false)
	boolValue bool
}

// ParseFlags takes the runtime flags out of args (Charm++ spellings and Go
// style both accepted, anywhere on the line) and returns the config with the
// program's own arguments in Args. "--" ends runtime flags.
func ParseFlags(args []string) (Config, error) { return ParseFlagsWith(args, nil) }

// ParseFlagsWith is ParseFlags for a program that declares flags of its
// own: own, not nil even when it declares none. On its line an argument
// that looks like a flag (a dash, then a letter: -itres, --itres=10) and
// is neither the program's nor the runtime's is an error, where
// ParseFlags would pass a single-dash one on in Args; a negative number
// is an argument. The program's flags as given are in ProgramFlags.
func ParseFlagsWith(args []string, own []Flag) (Config, error) {
	cfg := Config{PEs: runtime.GOMAXPROCS(0), Branching: manager.DefaultBranching}
	var pesGiven int
	num := func(flag, v string, min, max int) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("flag %s: %q is not a whole number (want %d to %d)", flag, v, min, max)
		}
		if n < min || n > max {
			return 0, fmt.Errorf("flag %s: %d is out of range (want %d to %d)", flag, n, min, max)
		}
		return n, nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			cfg.Args = append(cfg.Args, args[i+1:]...)
			break
		}
		name, val, hasVal := a, "", false
		if strings.HasPrefix(a, "--") {
			if k, v, ok := strings.Cut(a, "="); ok {
				name, val, hasVal = k, v, true
			}
		} else if strings.HasPrefix(a, "+p") && len(a) > 2 && a[2] >= '0' && a[2] <= '9' {
			name, val, hasVal = "+p", a[2:], true // +p4 (+ppn is not +p with "pn")
		} else if strings.HasPrefix(a, "-") {
			// a program's Go-style flag: -name=value
			if k, v, ok := strings.Cut(a, "="); ok && findFlag(own, k) != nil {
				name, val, hasVal = k, v, true
			}
		}
		value := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("flag %s needs a value", name)
			}
			i++
			return args[i], nil
		}
		var err error
		var v string
		switch name {
		case "+p", "--pes", "-pes":
			if v, err = value(); err == nil {
				cfg.PEs, err = num(name, v, 1, MaxPEs)
				pesGiven = cfg.PEs
			}
		case "++n":
			if v, err = value(); err == nil {
				cfg.Procs, err = num(name, v, 1, MaxPEs)
			}
		case "++ppn":
			if v, err = value(); err == nil {
				cfg.PPN, err = num(name, v, 1, MaxPEs)
			}
		case "--rendezvous":
			if v, err = value(); err == nil {
				if _, _, e := net.SplitHostPort(v); e != nil {
					err = fmt.Errorf("flag --rendezvous: %q is not HOST:PORT", v)
				}
				cfg.Rendezvous = v
			}
		case "--rendezvous-dir":
			if v, err = value(); err == nil && v == "" {
				err = fmt.Errorf("flag --rendezvous-dir: empty directory name")
			}
			cfg.RendezvousDir = v
		case "--listen":
			if v, err = value(); err == nil && v == "" {
				err = fmt.Errorf("flag --listen: empty address")
			}
			cfg.Listen = v
		case "--connect-timeout":
			if v, err = value(); err == nil {
				cfg.ConnectTimeout, err = time.ParseDuration(v)
				if err != nil || cfg.ConnectTimeout <= 0 {
					err = fmt.Errorf("flag --connect-timeout: %q is not a positive duration (30s, 2m)", v)
				}
			}
		case "--heartbeat-timeout":
			if v, err = value(); err == nil {
				cfg.HeartbeatTimeout, err = time.ParseDuration(v)
				if err != nil || cfg.HeartbeatTimeout <= 0 {
					err = fmt.Errorf("flag --heartbeat-timeout: %q is not a positive duration (30s, 2m)", v)
				}
			}
		case "--log-level":
			if v, err = value(); err == nil {
				cfg.LogLevel = v
				_, err = newLogger(v)
			}
		case "--wire-check":
			cfg.WireCheck = true
		case "--ft-verify":
			cfg.FTVerify = true
		case "--branching":
			if v, err = value(); err == nil {
				cfg.Branching, err = num(name, v, 2, 64)
			}
		case "+balancer", "--lb", "--balancer":
			if v, err = value(); err == nil {
				for _, n := range balancerNames(v) {
					if _, err = loadbalance.New(n, loadbalance.Options{}); err != nil {
						err = fmt.Errorf("flag %s: %w", name, err)
						break
					}
				}
				if cfg.Balancer != "" && len(balancerNames(v)) > 0 {
					v = cfg.Balancer + "," + v
				}
				cfg.Balancer = v
			}
		case "+LBDebug":
			if v, err = value(); err == nil {
				cfg.LBDebug, err = num(name, v, 0, 2)
			}
		case "+LBDump":
			if v, err = value(); err == nil && v == "" {
				err = fmt.Errorf("flag +LBDump: empty file name")
			}
			cfg.LBDump = v
		case "+LBUseCpuTime":
			cfg.LBCPUTime = true
		case "+LBOff":
			cfg.LBOff = true
		case "+LBPeriod":
			if v, err = value(); err == nil {
				var sec float64
				sec, err = strconv.ParseFloat(v, 64)
				if err != nil || sec <= 0 || sec > 1e6 {
					err = fmt.Errorf("flag +LBPeriod: %q is not a positive number of seconds", v)
				}
				cfg.LBPeriod = time.Duration(sec * float64(time.Second))
			}
		case "+LBTolerance":
			if v, err = value(); err == nil {
				cfg.LBTolerance, err = strconv.ParseFloat(v, 64)
				if err != nil || cfg.LBTolerance < 0 || cfg.LBTolerance > 10 {
					err = fmt.Errorf("flag +LBTolerance: %q is not a fraction from 0 to 10 (0.05: 5%% above average)", v)
				}
			}
		case "--spin":
			if v, err = value(); err == nil && v != "auto" {
				if cfg.SpinPolls, err = num(name, v, 0, 1<<20); cfg.SpinPolls == 0 {
					cfg.SpinPolls = -1 // never
				}
			}
		case "--ckpt-period", "+ckptPeriod":
			if v, err = value(); err == nil {
				cfg.CkptSteps, cfg.CkptEvery, err = ckptPeriod(v)
			}
		case "--ckpt-dir":
			if v, err = value(); err == nil && v == "" {
				err = fmt.Errorf("flag --ckpt-dir: empty directory name")
			}
			cfg.CheckpointDir = v
		case "--trace":
			if v, err = value(); err == nil {
				_, err = traceFormat(v)
			}
			cfg.Trace = v
		case "--progress-line":
			if v, err = value(); err == nil && v != "auto" && v != "on" && v != "off" {
				err = fmt.Errorf("flag --progress-line: %q: want auto, on or off", v)
			}
			cfg.ProgressLine = v
		case "--summary-json", "--cpuprofile", "--memprofile", "--trace-go":
			if v, err = value(); err == nil && v == "" {
				err = fmt.Errorf("flag %s: empty file name", name)
			}
			switch name {
			case "--summary-json":
				cfg.SummaryJSON = v
			case "--cpuprofile":
				cfg.CPUProfile = v
			case "--memprofile":
				cfg.MemProfile = v
			case "--trace-go":
				cfg.GoTrace = v
			}
		case "--ft", "+ft":
			if v, err = value(); err == nil {
				cfg.FT, err = protocolName(v)
			}
		case "--teams":
			if v, err = value(); err == nil {
				if _, aerr := strconv.Atoi(v); aerr != nil && v != "process" && v != "auto" {
					err = fmt.Errorf("flag --teams: %q is neither a number of PEs per team, process nor auto", v)
				} else if aerr == nil {
					_, err = num(name, v, 1, 1<<20)
				}
				cfg.Teams = v
			}
		case "--log-limit":
			if v, err = value(); err == nil {
				if cfg.LogLimit, err = ParseSize(v); err != nil || cfg.LogLimit == 0 {
					err = fmt.Errorf("flag --log-limit: %q is not a size in bytes above zero (64M, 512K, 1G)", v)
				}
			}
		case "--log-limit-strategy":
			if v, err = value(); err == nil {
				if err = validLimitStrategy(v); err != nil {
					err = fmt.Errorf("flag --log-limit-strategy: %w", err)
				}
				cfg.LogLimitStrategy = v
			}
		case "--teams-alpha", "--teams-beta":
			if v, err = value(); err == nil {
				var w float64
				w, err = strconv.ParseFloat(v, 64)
				if err != nil || w < 0 || w > 100 || math.IsNaN(w) {
					err = fmt.Errorf("flag %s: %q is not a weight from 0 to 100", name, v)
				}
				if name == "--teams-alpha" {
					cfg.TeamsAlpha = w
				} else {
					cfg.TeamsBeta = w
				}
			}
		case "--kill":
			if v, err = value(); err == nil {
				var k Kill
				if k, err = ParseKill(v); err == nil {
					cfg.Kills = append(cfg.Kills, k)
				}
			}
		case "--kill-file", "+killFile":
			if v, err = value(); err == nil {
				var ks []Kill
				if ks, err = readKillFile(v); err == nil {
					cfg.Kills = append(cfg.Kills, ks...)
				}
			}
		case "--watchdog":
			if v, err = value(); err == nil {
				cfg.Watchdog, err = watchdogFlag(v)
			}
		case "--transport-chaos":
			if v, err = value(); err == nil {
				cfg.TransportChaos, err = chaosSeed("flag --transport-chaos", v)
			}
		case "--restart", "+restart":
			if v, err = value(); err == nil && v == "" {
				err = fmt.Errorf("flag --restart: empty directory name")
			}
			cfg.Restart = v
		case "--help", "-h", "-help", "+help":
			return cfg, ErrHelp
		default:
			if f := findFlag(own, name); f != nil {
				v := ""
				if f.Arg != "" {
					if v, err = value(); err != nil {
						return cfg, err
					}
				} else if hasVal && !f.boolValue {
					return cfg, fmt.Errorf("flag %s takes no value", name)
				} else if hasVal {
					v = val // a Go boolean flag: -v=false
				}
				if err := f.Set(v); err != nil {
					return cfg, fmt.Errorf("flag %s: %w", name, err)
				}
				if f.Arg != "" && !hasVal {
					cfg.ProgramFlags = append(cfg.ProgramFlags, name, v)
				} else {
					cfg.ProgramFlags = append(cfg.ProgramFlags, a)
				}
				continue
			}
			if strings.HasPrefix(a, "+") || (strings.HasPrefix(a, "--") && len(a) > 2) || (own != nil && looksLikeFlag(a)) {
				hint := didYouMean(name, own)
				if hint == "" && strings.HasPrefix(a, "+p") {
					_, err := num("+p", a[2:], 1, MaxPEs) // +pmany: a PE count, mistyped
					return cfg, err
				}
				if own != nil && strings.HasPrefix(a, "-") {
					// a program that declares its flags: a mistyped one is
					// refused, not taken for an argument
					return cfg, fmt.Errorf("unknown flag %s: neither the program's nor the runtime's (%ssee --help)", a, hint)
				}
				return cfg, fmt.Errorf("unknown runtime flag %s (%ssee --help)", a, hint)
			}
			cfg.Args = append(cfg.Args, a)
		}
		if err != nil {
			return cfg, err
		}
	}
	_, launched, from, err := launcher(os.Getenv)
	if err != nil {
		return cfg, err
	}
	if cfg.Procs > 0 || cfg.PPN > 0 || launched > 1 {
		if launched == 1 && cfg.Procs == 0 && from != cluster.RankEnv {
			launched = 0 // srun -n 1: one process, as without a launcher
		}
		pes, procs, ppn, err := layout(pesGiven, cfg.Procs, cfg.PPN, launched)
		if err != nil {
			return cfg, err
		}
		cfg.PEs, cfg.Procs, cfg.PPN = pes, procs, ppn
		if pes == 0 {
			cfg.PEs = runtime.GOMAXPROCS(0)
		}
	}
	return cfg, nil
}

func findFlag(fs []Flag, name string) *Flag {
	for i := range fs {
		if fs[i].Name == name {
			return &fs[i]
		}
	}
	return nil
}

// WriteFlagUsage writes a program's own flags in the runtime usage's style.
func WriteFlagUsage(w io.Writer, fs []Flag) {
	for _, f := range fs {
		head := f.Name
		if f.Arg != "" {
			head += " " + f.Arg
		}
		if len(head) < 22 {
			fmt.Fprintf(w, "  %-22s %s\n", head, f.Usage)
		} else {
			fmt.Fprintf(w, "  %s\n  %-22s %s\n", head, "", f.Usage)
		}
	}
}

// ckptPeriod reads --ckpt-period: a whole number of steps, or a duration.
func ckptPeriod(v string) (int, time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n < 1 {
			return 0, 0, fmt.Errorf("flag --ckpt-period: %d steps: want at least 1", n)
		}
		return n, 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, 0, fmt.Errorf("flag --ckpt-period: %q is neither a number of steps nor a duration (30s, 2m)", v)
	}
	if d <= 0 {
		return 0, 0, fmt.Errorf("flag --ckpt-period: %v: want a positive duration", d)
	}
	return 0, d, nil
}

// chaosSeed reads a transport-chaos seed: a whole number, 0 for none.
func chaosSeed(what, v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a seed (a whole number; 0: off)", what, v)
	}
	return n, nil
}

// DefaultSpinPolls is how long at most an idle PE polls before it parks,
// where every PE has a core: about 30 µs here (a poll takes 0.47 ns:
// pe's BenchmarkSpinPoll). Shorter spins let a partner's short stall (its
// thread descheduled, a GC pause) end the spin: 4096 polls (2 µs) blocked
// once in 3 to 30 ping-pong round trips, 16384 once in 150–250, 65536
// once in 4,000–25,000; each block costs a wake-up of several µs. LeanMD
// on 2 PEs, in one process or two, runs the same with 4096 and 65536.
const DefaultSpinPolls = 65536

// spinPolls is the PE layer's SpinPolls for the Config's (see there), in a
// process of local PEs, with onHost PEs on its host (its own and those of
// the job's other processes there; remote: other processes). By default
// PEs spin only where each has a core: a spinning PE takes its core from
// whatever shares it. Nor in a test binary, which runs programs side by
// side, and go test runs several binaries at once (the suite ran 40%
// longer on 2 cores with them spinning).
func spinPolls(cfg, local, onHost int, remote bool) int {
	switch {
	case cfg < 0:
		return 0
	case cfg > 0:
		return cfg
	case spinsByDefault(local, onHost, remote) && !testing.Testing():
		return DefaultSpinPolls
	}
	return 0
}

// jobGCPercent is the collector's GOGC in a job of several processes
// that share their host's cores; ownCoreGCPercent where each has a core
// of its own.
const (
	jobGCPercent     = 200
	ownCoreGCPercent = 100
)

// collectorFor is the collection policy of a process of a job of several
// processes, procs of them on its host of cpus cores with avail bytes
// available there (0: unknown): GOGC ownCoreGCPercent (Go's default) if
// each process has a core, jobGCPercent if they share cores, and a soft
// memory limit of three quarters of the host's share of avail (near it
// the collector runs as often as it must); 0 leaves a setting as it is,
// and GOGC or GOMEMLIMIT in the environment is the user's. Each process
// collects on its own: while one process's PE is held up, the others
// wait for it at the next synchronisation, where in one process every PE
// meets the same collections. Where processes share cores, a collection
// takes CPU the others wait for: LeanMD 3×3×3 on 16 processes of one PE
// on 2 cores, GOGC 100 against 200, 36.2 / 37.1 / 41.9 against 31.8 /
// 32.9 / 35.8 ms a step (alternated). Where each has a core, it runs
// while the process would wait anyway: on 2 processes of one PE, GOGC
// 100 / 150 / 200 ran at 10.28 / 9.97 / 10.12 ms a step (medians of 5
// alternated rounds, ranges overlapping, the one-process run of 2 PEs
// 10.34) and peaked at 31.7–33.5 / 35.2–36.9 / 38.0–38.4 MB a process.
// (Before messages between processes stopped allocating a frame, GOGC 100
// cost 4% there: 1.08× the one-process run against 1.04×.)
func collectorFor(gogc, memLimit string, procs, cpus int, avail uint64) (percent int, limit int64) {
	if gogc != "" {
		return 0, 0
	}
	percent = jobGCPercent
	if procs <= cpus {
		percent = ownCoreGCPercent
	}
	if memLimit == "" && avail > 0 {
		limit = int64(avail / uint64(procs) / 4 * 3)
	}
	return percent, limit
}

// hostShare is how many Ps (GOMAXPROCS) a process of local PEs takes
// where the job has onHost PEs on its host of cpus cores, and Go gave it
// procs; 0: leave procs. A process that shares its host with others of
// the job takes its share of the cores (at least one): with Go's default
// every process takes them all, and their threads (PEs, links, the
// collector's) fight over the cores at the OS's pace. LeanMD 3×3×3, 2
// processes of 2 PEs on 2 cores: 1.095× the one process of 4 PEs with
// GOMAXPROCS 2 each, 1.004× with 1; 2 processes of 1 PE on 2 cores:
// 1.10× the one process of 2 PEs with GOMAXPROCS 2 each, 1.00× with 1
// (the vector kernel's; medians of alternated rounds). Their link's
// reader then shares the PE's P, and the PE does not spin (spinsByDefault)
// but yields for its links (pe's yieldForLinks): a round trip between them
// took 0.76–1.22× raw TCP's, a stream at least 0.78× its rate (6 runs).
// GOMAXPROCS in the environment overrides it.
func hostShare(local, onHost, cpus, procs int) int {
	if onHost <= local {
		return 0 // alone on its host
	}
	n := max(1, cpus*local/onHost)
	if n >= procs {
		return 0
	}
	return n
}

// spinsByDefault: every PE has a core, and, in a job of several
// processes, a P is left for the links' readers: Go looks for what the
// network brought only when a P has nothing else to run, so PEs spinning
// on every P hold a message that came for them back until a spin ends
// (processes of 1 PE with GOMAXPROCS 1: a round trip 85–104 µs against
// 49–60 without the spin).
func spinsByDefault(local, onHost int, remote bool) bool {
	ps := runtime.GOMAXPROCS(0)
	if remote {
		ps--
	}
	return local <= ps && onHost <= runtime.NumCPU()
}

// watchdogFlag reads --watchdog's value: a duration, or 0 / off.
func watchdogFlag(v string) (time.Duration, error) {
	if v == "0" || strings.EqualFold(v, "off") {
		return -1, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("flag --watchdog: %q is not a positive duration (10s, 2m) or 0 (off)", v)
	}
	return d, nil
}

// validLimitStrategy checks --log-limit-strategy's name.
func validLimitStrategy(name string) error { return mcml.ValidName(name) }

// limitStrategy is --log-limit-strategy's strategy for PE me of n: under
// cluster, the PEs' numbers halved until the first checkpoint brings the
// clusters of the traffic measured (limitClusters).
func limitStrategy(name string, me, n int) mcml.Strategy {
	if name == (mcml.Cluster{}).Name() {
		return mcml.ClusterOf(mcml.IndexDendrogram(n), me)
	}
	return mcml.Heaviest{}
}

// limitClusters is the cluster strategy's clustering at each checkpoint
// (manager.Options.Recluster): a dendrogram of the traffic between PEs
// measured since the one before (average linkage), or none while
// nothing was measured.
func limitClusters(n int) func(rows [][]uint64) ([][2]int32, error) {
	return func(rows [][]uint64) ([][2]int32, error) {
		m := teams.NewMatrix(n)
		for u, row := range rows {
			for v, w := range row {
				m.Add(u, v, float64(w))
			}
		}
		if m.Between() == 0 {
			return nil, nil
		}
		d, err := mcml.BuildDendrogram(m)
		if err != nil {
			return nil, err
		}
		return d.Joins(), nil
	}
}

// chooseTeams makes the teams --teams asks for (the zero Teams when the
// protocol has none), and the checkpoint buddies' stride that keeps each
// PE's second snapshot copy in another team (and, as stride asked, in
// another process).
func chooseTeams(cfg Config, spec ftlayer.ProtocolSpec, stride int) (ftlayer.Teams, int, error) {
	if !spec.Teams && (!spec.WithTeams || cfg.Teams == "") {
		return ftlayer.Teams{}, stride, nil
	}
	v := cfg.Teams
	if v == "" {
		if cfg.Procs <= 1 {
			return ftlayer.Teams{}, 0, fmt.Errorf("flag --teams: --ft %s needs teams: --teams N (blocks of N consecutive PEs), --teams auto or, with several processes, --teams process", spec.Name)
		}
		v = "process"
	}
	if v == "auto" {
		if cfg.Procs > 1 {
			return ftlayer.Teams{}, 0, fmt.Errorf("flag --teams auto: chosen teams are for one process (with several, --teams process makes each process a team)")
		}
		return ftlayer.Teams{}, stride, nil // every PE alone until a checkpoint chooses
	}
	var teams ftlayer.Teams
	var err error
	switch {
	case v == "process":
		of := make([]int32, cfg.PEs)
		for r := 0; r < max(cfg.Procs, 1); r++ {
			first, count := cluster.Block(cfg.PEs, max(cfg.Procs, 1), r)
			for p := first; p < first+count; p++ {
				of[p] = int32(r)
			}
		}
		teams, err = ftlayer.TeamsOf(of)
	default:
		size, _ := strconv.Atoi(v)
		teams, err = ftlayer.BlockTeams(cfg.PEs, size)
	}
	if err != nil {
		return ftlayer.Teams{}, 0, fmt.Errorf("flag --teams %s: %w", v, err)
	}
	// the buddy is the largest team's size on: in another team, as long
	// as no team holds more than half the PEs (and in another process
	// when a process is a team or teams are blocks of processes)
	stride = max(stride, teams.Largest())
	if err := ftlayer.NewBuddies(cfg.PEs, stride).Apart(teams); err != nil {
		return ftlayer.Teams{}, 0, fmt.Errorf("flag --teams %s: %w", v, err)
	}
	return teams, stride, nil
}

// autoTeams is --teams auto's choice (manager.Options.Regroup): Algorithm
// 1 of papers/001 over the volume the PEs sent each other since the last
// checkpoint, with teams of at most half the PEs (each PE's checkpoint
// copy lives in another team). Nothing measured keeps the teams.
func autoTeams(cfg Config) func(rows [][]uint64) ([]int32, error) {
	opt := teams.Options{Alpha: cfg.TeamsAlpha, Beta: cfg.TeamsBeta, MaxTeam: max(cfg.PEs/2, 1), Seed: cfg.Seed}
	if opt.Alpha == 0 && opt.Beta == 0 {
		opt.Alpha, opt.Beta = 0.23, 0.124
	}
	return func(rows [][]uint64) ([]int32, error) {
		m := teams.NewMatrix(cfg.PEs)
		for u, row := range rows {
			for v, w := range row {
				m.Add(u, v, float64(w))
			}
		}
		if m.Between() == 0 {
			return nil, nil
		}
		r, err := teams.Partition(m, opt)
		if err != nil {
			return nil, err
		}
		of := make([]int32, cfg.PEs)
		for p, k := range r.TeamOf(cfg.PEs) {
			of[p] = int32(k)
		}
		return of, nil
	}
}

func protocolName(v string) (string, error) {
	spec, err := ftlayer.LookupProtocol(v)
	if err != nil && strings.EqualFold(v, "mcml") {
		return "", fmt.Errorf("flag --ft: mcml is a log limit on a logging protocol: --ft scmel --log-limit SIZE (or camel, team)")
	}
	if err != nil {
		return "", fmt.Errorf("flag --ft: %w", err)
	}
	return spec.Name, nil
}

// WriteUsage writes the runtime flags' usage.
func WriteUsage(w io.Writer) { fmt.Fprintf(w, RuntimeUsage, runtime.GOMAXPROCS(0)) }

// Stats is what a finished run reports.
type Stats struct {
	PEs []pe.Stats // envelopes per PE, runtime traffic included
	// Ops sums, over PEs, what the program asked for: sends, multicasts,
	// deliveries, broadcasts, contributions, with payload bytes; PEOps is
	// the same by PE (each PE's last incarnation: Ops also counts what
	// failures discarded).
	Ops   manager.Stats
	PEOps []manager.Stats
	// FT is what fault tolerance did: failures, rollbacks, recovery time.
	FT FTStats
	// Events is how many events a deterministic run ran, and Trace a
	// hash of its interleaving.
	Events int
	Trace  uint64
	// LB is what load balancing did (nil: no balancer).
	LB *LBStats
}

// InputError is a run refused before it started: bad flags, a missing or
// mismatched checkpoint. Programs exit with code 2 on it.
type InputError struct{ Err error }

func (e InputError) Error() string { return e.Err.Error() }
func (e InputError) Unwrap() error { return e.Err }

// Result is how a run ended.
type Result struct {
	Code  int
	Err   error
	Stats Stats
	// Main is the main chare (a *C) as the run left it, in the process
	// that holds PE 0 (nil if the run ended before it was made, and in
	// every other process).
	Main any
	// Process is this process's rank: only process 0 reports the job's
	// results and statistics (the others' Stats are their own PEs').
	Process int
	// Processes lists the job's processes and the PEs each held.
	Processes []Process
	// Checked: the run was only checked (CheckEnv), and nothing ran.
	Checked bool
	// Summary is the run as data, in the process that holds PE 0 (nil
	// elsewhere, and for a run that did not start).
	Summary *Summary
}

// CheckEnv, set in a program's environment, makes its run check what it
// was given — the runtime flags, the program's own arguments as far as it
// checks them before it runs, a checkpoint to restart from, the teams for
// the job's layout — and end there: with its one line of refusal (exit 2),
// or without running (Result.Checked, exit 0). charmrun sets it in one
// process of a charmgo program before it starts a job of several, so that
// what every process would refuse is refused once, before any starts.
const CheckEnv = "CHARMGO_CHECK"

// finishTimeout bounds how long the processes of a job that ended wait
// for each other's statistics; failedFinishTimeout, of one that failed:
// its line matters more than the others' figures, and charmrun kills
// every process 10 s after the first failed (cluster's exitGrace), which
// killed process 0 before it said why once, waiting for a replacement
// that would never send its statistics.
const (
	finishTimeout       = 30 * time.Second
	failedFinishTimeout = 3 * time.Second
)

func hostname() string {
	h, _ := os.Hostname()
	return h
}

func readKillFile(path string) ([]Kill, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("flag --kill-file: %w", err)
	}
	defer f.Close()
	ks, err := ParseKillFile(f)
	if err != nil {
		return nil, fmt.Errorf("flag --kill-file %s: %w", path, err)
	}
	return ks, nil
}

// Run runs a program: it starts the PEs, constructs the main chare on PE 0
// with cfg.Args, and returns when a chare calls Exit, when a runtime error or
// panic ends the run, or when main's constructor has returned and the run is
// quiescent (exit code 0).
func Run[C any](main *Type[C, []string], cfg Config) Result {
	args := cfg.Args
	if args == nil {
		args = []string{}
	}
	return RunWith(main, args, cfg)
}

// RunWith is Run for a main chare whose constructor takes a value of its
// own (NewMainTypeOf): a program's parameters reach main as arg, not
// through globals, so several runs may go on at once in one process.
func RunWith[C, A any](main *Type[C, A], arg A, cfg Config) Result {
	if main.info.kind != manager.CollMain {
		return Result{Code: 2, Err: InputError{fmt.Errorf("run: %s is not a main chare type (use NewMainType)", main.info.name)}}
	}
	sealRegistries()
	if cfg.PEs == 0 {
		cfg.PEs = runtime.GOMAXPROCS(0)
	}
	if cfg.Branching < 2 {
		cfg.Branching = manager.DefaultBranching
	}
	opt := manager.Options{Branching: cfg.Branching, Procs: cfg.Procs, CheckpointDir: cfg.CheckpointDir, FTVerify: cfg.FTVerify}
	if d := cfg.CheckpointDir; d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Result{Code: 2, Err: InputError{fmt.Errorf("flag --ckpt-dir: %w", err)}}
		}
	}
	spec, err := ftlayer.LookupProtocol(cfg.FT)
	if err != nil {
		return Result{Code: 2, Err: InputError{fmt.Errorf("flag --ft: %w", err)}}
	}
	cfg.FT = spec.Name
	lbOut := cfg.Stdout
	if lbOut == nil {
		lbOut = os.Stdout
	}
	bal, err := newBalancer(cfg, lbOut)
	if err != nil {
		return Result{Code: 2, Err: InputError{err}}
	}
	if bal != nil {
		opt.LB = manager.LBOptions{Balancer: bal, Off: cfg.LBOff, CPUTime: cfg.LBCPUTime, Periodic: cfg.LBPeriod > 0}
		if cfg.LBPeriod > 0 && spec.RecoversAlone {
			return Result{Code: 2, Err: InputError{fmt.Errorf("flag +LBPeriod: balancing steps started by the clock need a protocol that rolls every PE back (--ft none): under %s a recovering PE would decide otherwise", spec.Name)}}
		}
	}
	if cfg.CkptEvery > 0 && spec.RecoversAlone {
		// A PE recovering alone replays its own decisions; one taken from
		// the clock would come out otherwise.
		return Result{Code: 2, Err: InputError{fmt.Errorf("flag --ckpt-period %v: a checkpoint cadence in time needs a protocol that rolls every PE back (--ft none): under %s a recovering PE would decide otherwise from its clock; give a number of steps", cfg.CkptEvery, spec.Name)}}
	}
	if cfg.CkptSteps < 0 || cfg.CkptEvery < 0 {
		return Result{Code: 2, Err: InputError{fmt.Errorf("flag --ckpt-period: negative period")}}
	}
	if cfg.LogLimit > 0 && !spec.LogLimit {
		return Result{Code: 2, Err: InputError{fmt.Errorf("flag --log-limit: --ft %s does not bound its log (a limit is for --ft scmel, camel and team)", spec.Name)}}
	}
	if cfg.LogLimitStrategy != "" {
		if err := validLimitStrategy(cfg.LogLimitStrategy); err != nil {
			return Result{Code: 2, Err: InputError{fmt.Errorf("flag --log-limit-strategy: %w", err)}}
		}
		if cfg.LogLimit == 0 {
			return Result{Code: 2, Err: InputError{fmt.Errorf("flag --log-limit-strategy: no --log-limit to apply it to")}}
		}
	}
	if cfg.Teams != "" && !spec.Teams && !spec.WithTeams {
		return Result{Code: 2, Err: InputError{fmt.Errorf("flag --teams: --ft %s logs no teams (teams are for --ft team and camel)", spec.Name)}}
	}
	for _, k := range cfg.Kills {
		if k.PE < 0 || k.PE >= cfg.PEs {
			return Result{Code: 2, Err: InputError{fmt.Errorf("flag --kill: PE %d, but the run has %d PEs (0..%d)", k.PE, cfg.PEs, cfg.PEs-1)}}
		}
		if k.Simulated() && !cfg.Deterministic {
			return Result{Code: 2, Err: InputError{fmt.Errorf("kill %v: needs a deterministic run", k)}}
		}
		if cfg.Deterministic && !k.Simulated() && k.Step < 0 && k.Checkpoint == 0 {
			return Result{Code: 2, Err: InputError{fmt.Errorf("kill %v: a deterministic run has no clock", k)}}
		}
	}
	var restart recovery.Restart // the snapshots to restore (none: a fresh start)
	if cfg.Restart != "" {
		var err error
		if restart, err = loadCheckpoint(cfg.Restart, cfg.PEs, cfg.Branching, cfg.Procs, main.info); err != nil {
			return Result{Code: 2, Err: InputError{fmt.Errorf("flag --restart: %w", err)}}
		}
	}
	start, from := restart.Snaps, restart.From
	rs := &runState{stdout: cfg.Stdout, start: time.Now(), ckptSteps: cfg.CkptSteps, ckptEvery: cfg.CkptEvery}
	if rs.stdout == nil {
		rs.stdout = os.Stdout
	}
	newManager := func(p *pe.PE) *manager.Manager { return manager.New(p, &host{run: rs}, opt) }
	rs.sup = recovery.New(recovery.Config{PEs: cfg.PEs, Protocol: spec, Kills: cfg.Kills, Notices: cfg.Notices,
		RestartDir: cfg.Restart, RestartEpoch: restart.Epoch, NewManager: newManager, LogLimit: cfg.LogLimit > 0})
	limit := watchdogLimit(cfg)
	var res Result
	if v := os.Getenv("CHARMGO_TRANSPORT_CHAOS"); v != "" && cfg.TransportChaos == 0 && !cfg.Deterministic {
		seed, err := chaosSeed("CHARMGO_TRANSPORT_CHAOS", v)
		if err != nil {
			return Result{Code: 2, Err: InputError{err}}
		}
		cfg.TransportChaos = seed
	}
	pcfg := pe.Config{NumPEs: cfg.PEs, WireCheck: cfg.WireCheck, Chaos: cfg.TransportChaos, SampleUsage: usageSample, Timeline: cfg.Trace != "",
		Deterministic: cfg.Deterministic, Seed: cfg.Seed, MaxEvents: cfg.MaxEvents, LockThreads: bal != nil && cfg.LBCPUTime && !cfg.Deterministic,
		MeasureIdle: bal != nil && !cfg.LBOff}
	log, err := newLogger(cfg.LogLevel)
	if err != nil {
		return Result{Code: 2, Err: InputError{err}}
	}
	defer log.Sync()
	var job *cluster.Job
	var ending chan struct{} // closed when the run ends here (several processes)
	if cfg.Procs > 1 {
		switch {
		case cfg.Deterministic:
			return Result{Code: 2, Err: InputError{fmt.Errorf("++n %d: a deterministic run is one process", cfg.Procs)}}
		}
		for _, k := range cfg.Kills {
			if k.Checkpoint > 0 || k.Simulated() {
				return Result{Code: 2, Err: InputError{fmt.Errorf("++n %d: kill %v: with several processes a kill is a process's SIGKILL at a step or a time (--kill PE@STEP, PE@TIME kill the process holding the PE)", cfg.Procs, k)}}
			}
		}
	}
	if os.Getenv(CheckEnv) != "" {
		stride := 0 // as process 0 sets it
		if cfg.Procs > 1 {
			_, stride = cluster.Block(cfg.PEs, cfg.Procs, 0)
		}
		if _, _, err := chooseTeams(cfg, spec, stride); err != nil {
			return Result{Code: 2, Err: InputError{err}}
		}
		return Result{Checked: true}
	}
	if cfg.Procs > 1 {
		if job, err = joinJob(&cfg, log); err != nil {
			code := 1
			if errors.As(err, new(InputError)) {
				code = 2
			}
			return Result{Code: code, Err: err}
		}
		defer job.Close()
		ending = make(chan struct{})
		rs.sup.ReplicateEvents(job, cfg.PEs, ending)
		pcfg.FirstPE, pcfg.LocalPEs = job.PEs()
		opt.BuddyStride = pcfg.LocalPEs // checkpoint copies in another process
		pcfg.Remote = job
		pcfg.Chaos = 0
		holder := func(k recovery.Kill) int {
			for r := range cfg.Procs {
				if first, n := cluster.Block(cfg.PEs, cfg.Procs, r); k.PE >= first && k.PE < first+n {
					return r
				}
			}
			return -1
		}
		rs.sup.KillProcesses(func(k recovery.Kill) {
			if r := holder(k); r >= 0 {
				job.KillProcess(r, fmt.Sprintf("--kill %s: process %d holds PE %d", k.Flag(), r, k.PE))
			}
		}, func(k recovery.Kill) bool { return holder(k) == job.Rank() }, job.Replacement())
	}
	if given := cfg.programLine(); cfg.Restart != "" && len(given) > 0 && cfg.Notices != nil && (job == nil || job.Rank() == 0) {
		fmt.Fprintf(cfg.Notices, "charmgo: --restart %s: the run resumes from its checkpoint, main chare and all: the program's flags and arguments given with it (%s) are not used\n", cfg.Restart, strings.Join(given, " "))
	}
	teams, stride, err := chooseTeams(cfg, spec, opt.BuddyStride)
	if err != nil {
		return Result{Code: 2, Err: InputError{err}}
	}
	opt.BuddyStride = stride
	rs.sup.SetTeams(teams)
	rs.sup.SetBuddyStride(stride)
	balances := len(balancerNames(cfg.Balancer)) > 0
	opt.FT = func(me, n int, t ftlayer.Trees, net func(int, *ftlayer.Packet)) ftlayer.Hook {
		hc := ftlayer.HookConfig{Teams: rs.sup.Teams(), Events: rs.sup.Events()} // (--teams auto: the teams of the last checkpoint)
		if cfg.LogLimit > 0 {
			hc.Limit = ftlayer.LogLimit{Bytes: cfg.LogLimit, Strategy: limitStrategy(cfg.LogLimitStrategy, me, n), Gate: rs.sup.Gate(),
				Exempt: balances && (me == 0 || me == hc.Teams.WitnessOf(0, n))}
		}
		h := spec.NewHook(me, n, t, net, hc)
		if cfg.WrapHook != nil {
			h = cfg.WrapHook(me, h, t)
		}
		return h
	}
	if cfg.Teams == "auto" {
		opt.Regroup = autoTeams(cfg)
		opt.Teams = rs.sup.Teams
	}
	if cfg.LogLimit > 0 && cfg.LogLimitStrategy == (mcml.Cluster{}).Name() {
		opt.Recluster = limitClusters(cfg.PEs)
	}
	local := cmp.Or(pcfg.LocalPEs, pcfg.NumPEs)
	onHost := local
	if job != nil {
		onHost = 0
		procsOnHost := 0
		host := hostname()
		for _, m := range job.Members() {
			if m.Host == host {
				_, c := cluster.Block(cfg.PEs, cfg.Procs, m.Rank)
				onHost += c
				procsOnHost++
			}
		}
		gc, limit := collectorFor(os.Getenv("GOGC"), os.Getenv("GOMEMLIMIT"), max(procsOnHost, 1), runtime.NumCPU(), AvailableMemory())
		if gc > 0 {
			debug.SetGCPercent(gc)
		}
		if limit > 0 {
			debug.SetMemoryLimit(limit)
		}
	}
	if n := hostShare(local, max(onHost, local), runtime.NumCPU(), runtime.GOMAXPROCS(0)); n > 0 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(n)
	}
	pcfg.SpinPolls = spinPolls(cfg.SpinPolls, local, max(onHost, local), job != nil)
	if cfg.Deterministic {
		pcfg.OnEvent = func(_ *pe.Node, e int) { rs.sup.AtEvent(e + 1) }
		pcfg.OnHandOver = func(_ *pe.Node, src int, count uint64) { rs.sup.AtHandOver(src, count) }
		limit = 0 // no clock: a run with nothing to do ends at once
	}
	node, err := pe.NewNode(pcfg, func(p *pe.PE) pe.Handler { return newManager(p) })
	if err != nil {
		return Result{Code: 2, Err: InputError{err}}
	}
	if ending != nil {
		go func() { <-node.Done(); close(ending) }()
	}
	stopDumps := make(chan struct{})
	defer close(stopDumps)
	dumpTo := cfg.DumpTo
	if dumpTo == nil {
		dumpTo = os.Stderr
	}
	var waiting func() string
	if job != nil {
		waiting = job.Waiting
	}
	dumpOnSignal(node, dumpTo, stopDumps, waiting)
	initial := make([][]pe.Envelope, node.NumPEs())
	first, local := node.LocalPEs()
	for p := first; p < first+local; p++ {
		env := pe.Envelope{Type: manager.CreateType(), Kind: pe.KindSystem, Payload: &manager.CreateMsg{
			Coll: manager.MainCollection, Kind: manager.CollMain, Type: main.info.id, Name: main.info.name,
			Arg: manager.Lazy{V: arg},
		}}
		if start != nil {
			prev := start[ftlayer.NewBuddies(len(start), opt.BuddyStride).Held(int32(p))]
			env = pe.Envelope{Type: manager.RestoreType(), Kind: pe.KindSystem, Payload: &manager.RestoreMsg{Own: start[p], Prev: prev, From: from[p]}}
		}
		initial[p] = []pe.Envelope{env}
		if job == nil || !job.Replacement() {
			node.Inject(p, env) // a replacement's PEs start as recovery tells them
		}
	}
	if bal != nil && cfg.LBDump != "" && node.IsLocal(0) {
		if err := bal.openDump(cfg.LBDump); err != nil {
			return Result{Code: 2, Err: InputError{err}}
		}
	}
	rs.sup.Begin(node, initial)
	var procs *recovery.Processes
	if job != nil {
		// charmrun replaces a lost process; under srun or mpirun nothing does
		procs = rs.sup.ForJob(job, node, os.Getenv(cluster.CharmrunEnv) != "")
		job.SetRecovery(procs)
		job.Run(node)
	}
	if node.IsLocal(0) && !cfg.Deterministic && progressLine(cfg.ProgressLine, rs.stdout) {
		rs.live = newLiveLine(rs.stdout)
		rs.stdout = rs.live
		if bal != nil {
			bal.out = rs.live
		}
	}
	stopProfiles, err := startProfiles(cfg, job)
	if err != nil {
		node.Fail(InputError{err})
	}
	started := time.Now()
	node.Start()
	if bal != nil && cfg.LBPeriod > 0 && node.IsLocal(0) && !cfg.Deterministic {
		go tickBalancer(node, cfg.LBPeriod, stopDumps)
	}
	if limit > 0 {
		go watch(node, limit, waiting)
	}
	res.Code, res.Err = node.Wait()
	ended := time.Now()
	if rs.live != nil {
		rs.live.end()
	}
	if err := stopProfiles(); err != nil && res.Err == nil {
		res.Code, res.Err = 1, err
	}
	if errors.Is(res.Err, pe.ErrNothingToDo) || errors.Is(res.Err, pe.ErrNoProgress) {
		res.Err = stalledDeterministic(node, res.Err)
	}
	res.Stats.Events, res.Stats.Trace = node.Events(), node.Trace()
	res.Stats.PEs = make([]pe.Stats, node.NumPEs())
	res.Stats.PEOps = make([]manager.Stats, node.NumPEs())
	mine := processResult{First: first, PEs: make([]pe.Stats, local), Usage: node.Usage(), Steps: rs.record.stepTimes(), Results: rs.record.reported(),
		Cost: ProcessCost{PeakRSSBytes: peakRSS(), Seconds: ended.Sub(started).Seconds()}}
	if job != nil {
		js := job.Stats()
		mine.Cost.DataLinks, mine.Cost.ControlSent, mine.Cost.ControlReceived = js.DataLinks, js.ControlSent, js.ControlReceived
		mine.Cost.HeartbeatsSent, mine.Cost.HeartbeatsReceived = js.HeartbeatsSent, js.HeartbeatsRecvd
	}
	for i := first; i < first+local; i++ {
		mine.PEs[i-first] = node.PE(i).Stats
		m := manager.Of(node.PE(i))
		mine.PEOps = append(mine.PEOps, m.Stats)
		mine.Log = append(mine.Log, m.FT().Stats())
	}
	var tparts []tracePart
	var offsets map[int]time.Duration
	if cfg.Trace != "" {
		rank := 0
		if job != nil {
			rank = job.Rank()
		}
		part := localTrace(node, rank)
		switch {
		case rank != 0:
			if err := writeTracePart(cfg.Trace, part); err != nil && res.Err == nil {
				res.Code, res.Err = 1, err
			}
		case job != nil:
			offsets = job.ClockOffsets(5, time.Second)
			tparts = append(tparts, part)
		default:
			tparts = append(tparts, part)
		}
	}
	results := []processResult{mine}
	res.Processes = []Process{{Rank: 0, FirstPE: first, PEs: local, Host: hostname(), Cost: mine.Cost}}
	if job != nil {
		res.Process = job.Rank()
		res.Processes = res.Processes[:0]
		for _, m := range job.Members() {
			f, c := cluster.Block(cfg.PEs, cfg.Procs, m.Rank)
			res.Processes = append(res.Processes, Process{Rank: m.Rank, FirstPE: f, PEs: c, Host: m.Host})
		}
		if job.Rank() != 0 && procs.Steered() {
			// (since process 0 was lost; it may have handed the steering
			// back since)
			st := rs.sup.Steered()
			mine.Steered = &st
		}
		wait := finishTimeout
		if res.Err != nil {
			wait = failedFinishTimeout
		}
		all, err := job.Finish(encodeResult(mine), wait)
		if err != nil && res.Err == nil {
			res.Code, res.Err = 1, err
		}
		if job.Rank() == 0 {
			results = results[:0]
			for r := range cfg.Procs {
				pr, err := decodeResult(all[r])
				if all[r] == nil || err != nil {
					if res.Err == nil {
						res.Code, res.Err = 1, fmt.Errorf("process %d sent no statistics at the end", r)
						if job.IsLost(r) {
							// (killed after the last step: nothing is left
							// to recover, but its part of the run is gone)
							res.Err = fmt.Errorf("process %d was lost as the job ended, after the last step, and took its statistics with it", r)
						}
					}
					continue
				}
				results = append(results, pr)
				if r < len(res.Processes) && res.Processes[r].Rank == r {
					res.Processes[r].Cost = pr.Cost
				}
			}
		}
	}
	for _, pr := range results {
		if pr.Steered != nil {
			rs.sup.AddSteered(*pr.Steered)
		}
		copy(res.Stats.PEs[pr.First:], pr.PEs)
		copy(res.Stats.PEOps[pr.First:], pr.PEOps)
		for _, o := range pr.PEOps {
			res.Stats.Ops.Add(o)
		}
		for i, l := range pr.Log {
			rs.sup.AddLog(pr.First+i, l)
		}
	}
	if node.IsLocal(0) {
		if m := manager.Of(node.PE(0)).Collection(manager.MainCollection); m != nil {
			if e := m.Local(pe.Idx(0)); e != nil {
				res.Main = e.Obj
			}
		}
	}
	if res.Err == nil && res.Code == 0 {
		if err := rs.sup.Unfired(); err != nil {
			res.Code, res.Err = 2, InputError{err}
		}
	}
	if errors.As(res.Err, new(InputError)) {
		res.Code = 2
	}
	if errors.As(res.Err, new(*StallError)) {
		res.Code = 3
	}
	if bal != nil && node.IsLocal(0) {
		lb := bal.stats
		res.Stats.LB = &lb
		if err := bal.close(); err != nil && res.Err == nil {
			res.Code, res.Err = 1, err
		}
	}
	res.Stats.FT = rs.sup.Stats()
	res.Stats.Ops.Add(rs.sup.LostOps())
	if len(tparts) > 0 {
		for r := 1; r < cfg.Procs; r++ {
			p, err := readTracePart(cfg.Trace, r)
			if err != nil {
				if cfg.Notices != nil {
					fmt.Fprintf(cfg.Notices, "charmgo: %v\n", err)
				}
				continue
			}
			tparts = append(tparts, p)
		}
		if err := writeTraceFile(cfg.Trace, mergeTrace(cfg, node.NumPEs(), tparts, offsets, ended.Sub(started))); err != nil && res.Err == nil {
			res.Code, res.Err = 1, err
		}
	}
	if node.IsLocal(0) {
		res.Summary = summarize(cfg, &res, results, started, ended)
		if cfg.SummaryJSON != "" {
			if err := writeSummaryFile(cfg.SummaryJSON, res.Summary); err != nil && res.Err == nil {
				res.Code, res.Err = 1, err
				res.Summary.ExitCode, res.Summary.Error = 1, err.Error()
			}
		}
	}
	return res
}

// Reports says whether this process reports the run RunWith returned,
// for a program that writes its own report from its main chare (LeanMD,
// the OpenAtom proxy): not if the run failed (err), was only checked
// (CheckEnv: nothing ran), or ran in a process other than the job's
// first, which reports nothing and only passes on its exit code (err
// when it is not 0).
func (res Result) Reports(program string) (bool, error) {
	switch {
	case res.Err != nil:
		return false, res.Err
	case res.Checked:
		return false, nil
	case res.Process != 0 && res.Code != 0:
		return false, fmt.Errorf("%s exited with code %d", program, res.Code)
	case res.Process != 0:
		return false, nil
	}
	return true, nil
}

// ExitCode reports a run's error the way Main does and gives the exit
// code, for programs that run with their own arguments (RunWith): 0
// without an error; 1, saying nothing, for another process's error that
// process reports itself; otherwise the dump of what the PEs waited for
// (a stall) and one line "program: error" on w, and 2 for bad input
// (InputError), 3 for a stall (StallError), 1 for anything else.
func ExitCode(w io.Writer, program string, err error) int {
	if err == nil {
		return 0
	}
	if ReportedElsewhere(err) {
		return 1
	}
	io.WriteString(w, DumpOf(err))
	fmt.Fprintf(w, "%s: %v\n", program, err)
	switch {
	case errors.As(err, new(InputError)):
		return 2
	case errors.As(err, new(*StallError)):
		return 3
	}
	return 1
}

// Main is a program's whole main function: it parses the runtime flags from
// os.Args, runs, prints the run's summary (Summary.WriteText) or reports
// its error on stderr, and exits with the run's code (2 for bad flags).
// A program with flags of its own uses MainWith.
func Main[C any](main *Type[C, []string]) {
	prog := filepath.Base(os.Args[0])
	cfg, err := ParseFlags(os.Args[1:])
	if errors.Is(err, ErrHelp) {
		WriteUsage(os.Stdout)
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
		os.Exit(2)
	}
	cfg.Notices = os.Stderr
	os.Exit(finish(prog, Run(main, cfg)))
}

// finish reports a run the way Main does and gives its exit code: the
// summary on stdout, or the error (and the dump of a stall) on stderr.
func finish(prog string, res Result) int {
	if res.Err != nil && ReportedElsewhere(res.Err) {
		return max(res.Code, 1)
	}
	if res.Err == nil && res.Summary != nil {
		res.Summary.WriteText(os.Stdout)
	}
	if res.Err != nil {
		os.Stderr.WriteString(DumpOf(res.Err))
		fmt.Fprintf(os.Stderr, "%s: %v\n", prog, res.Err)
		if res.Code == 0 {
			res.Code = 1
		}
	}
	return res.Code
}
