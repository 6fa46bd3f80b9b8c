// Command charmrun launches a charmgo program with Charm++'s spellings:
//
//	charmrun +p4 ./leanmd 4 4 4 100              # one process, 4 PEs
//	charmrun ++n 2 ++ppn 2 ./leanmd 3 3 3 101     # 2 processes of 2 PEs
//	charmrun +p2 ./apps/leanmd 2 2 2 10           # a package directory: built first
//
// Every runtime flag given before the program (+pN, +p N, +balancer NAME,
// --ft P, --kill PE@STEP, --ckpt-dir DIR, --restart DIR, --watchdog D, …)
// is handed to it, as Charm++'s charmrun does; the program parses them
// like its own command line. With several processes (++n, ++ppn) it starts
// them on this machine (++local, the default) or over ssh on the hosts of a
// node list (++nodelist FILE, ++remote-shell CMD), serves their rendezvous,
// gives them a per-job secret, and ends them all if one fails or if
// charmrun itself is ended: no process outlives the job. It starts a
// replacement for a process killed mid-run (process 0 too: another
// process takes over steering the job); with --ckpt-dir DIR, a job that
// loses what it cannot replace (the one process of a job of one, or a
// process whose loss ended the job, killed by a signal charmrun did not
// pass on) runs again, once, from the last checkpoint complete in DIR.
package main

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe/cluster"
	"golang.org/x/sys/unix"
)

const usage = `usage: charmrun [options] program [program arguments]

program: an executable (a path, or a name on $PATH), or the directory of a
Go main package (./apps/leanmd), which charmrun builds first with go build.

options:
  +pN, +p N              number of PEs in all
  ++n K                  number of processes (default 1)
  ++ppn M                PEs per process (any two of +p, ++n, ++ppn give the third)
  ++local                start the processes on this machine (the default)
  ++nodelist FILE        start them over ssh on the hosts of FILE (Charm++'s
                         format: "group main" then "host NAME" lines), round robin
  ++remote-shell CMD     the command that runs a command on a host (default ssh)
  --listen HOST          address the job listens on (default 127.0.0.1; 0.0.0.0:
                         each process on its own host's address, for a node
                         list of other hosts)
  --connect-timeout D    every process must have joined within D (default 60s)
  +balancer NAME         load balancer, passed to the program
  --wire-check, --ft P, --kill PE@STEP, --ckpt-dir DIR, --restart DIR,
  --watchdog D, ...      any runtime flag (see the program's --help), passed
                         to the program; with --ckpt-dir DIR, a job that
                         loses what cannot be replaced (the one process of
                         a job of one) runs again, once, from DIR's last
                         complete checkpoint
  ++verbose              print the commands before running them
  -h, --help             this text
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	l, err := parse(args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "charmrun: %v\n", err)
		return 2
	}
	path, cleanup, err := resolve(l.prog, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "charmrun: %v\n", err)
		return 2
	}
	defer cleanup()
	if l.procs > 1 || l.nodelist != "" {
		if code := check(path, l.progArgs, stderr); code != 0 {
			return code // the program said why, once
		}
		job := cluster.Launch{Path: path, Args: l.progArgs, Name: l.prog, Procs: l.procs, Shell: l.shell,
			Listen: l.listen, ConnectTimeout: l.timeout, Verbose: l.verbose, Stdout: stdout, Stderr: stderr, Replace: true}
		if l.nodelist != "" {
			if job.Hosts, err = readNodelist(l.nodelist); err != nil {
				fmt.Fprintf(stderr, "charmrun: ++nodelist %s: %v\n", l.nodelist, err)
				return 2
			}
		}
		code, lost := job.RunJob()
		if code == 0 || lost == "" || l.ckptDir == "" {
			return code
		}
		return restartOnce(l, lost, stderr, func(args []string) (int, string) {
			job.Args = args
			return job.RunJob()
		})
	}
	code, lost := runOne(l, path, l.progArgs, stdout, stderr)
	if code == 0 || lost == "" || l.ckptDir == "" {
		return code
	}
	return restartOnce(l, lost, stderr, func(args []string) (int, string) {
		return runOne(l, path, args, stdout, stderr)
	})
}

// runOne runs a job of one process, the program itself, with args, and
// says whether it ended killed by a signal charmrun did not pass on to
// it (lost names it, "process 0 was killed by SIGKILL", in a line of
// charmrun's as well).
func runOne(l launchSpec, path string, args []string, stdout, stderr io.Writer) (code int, lost string) {
	if l.verbose {
		fmt.Fprintf(stderr, "charmrun: %s %s\n", path, strings.Join(args, " "))
	}
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "charmrun: start %s: %v\n", l.prog, err)
		return 1, ""
	}
	// Pass interrupts on, so ^C ends the program the way it would end alone.
	sig := make(chan os.Signal, 2)
	passed := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		for s := range sig {
			select {
			case passed <- s:
			default:
			}
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	signal.Stop(sig)
	close(sig)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			select {
			case <-passed: // it ended as asked
			default:
				lost = fmt.Sprintf("process 0 was killed by %s", unix.SignalName(ws.Signal()))
				fmt.Fprintf(stderr, "charmrun: %s\n", lost)
			}
			return 128 + int(ws.Signal()), lost
		}
		return ee.ExitCode(), ""
	}
	if err != nil {
		fmt.Fprintf(stderr, "charmrun: %s: %v\n", l.prog, err)
		return 1, ""
	}
	return 0, ""
}

var errHelp = errors.New("help")

// restartOnce runs a job again (runAgain, with the arguments given),
// once, after it ended because lost could not be replaced (process 0,
// which holds the job's membership and rendezvous, or a process that
// kept dying; the one process of a job of one): from the last checkpoint
// complete in its --ckpt-dir, or, if none is yet, as it started. The
// faults injected into the first run (--kill, --kill-file) are not
// injected again.
func restartOnce(l launchSpec, lost string, stderr io.Writer, runAgain func(args []string) (int, string)) int {
	drop := []string{"--kill", "--kill-file", "+killFile"}
	from := "as it started"
	latest, err := manager.ReadLatest(l.ckptDir)
	if err == nil {
		drop = append(drop, "--restart", "+restart")
		from = fmt.Sprintf("from checkpoint %d in %s", latest.Epoch, l.ckptDir)
	} else {
		from += fmt.Sprintf(" (no checkpoint is complete in --ckpt-dir: %v)", err)
	}
	args := append(slices.Clone(l.layout), without(l.pass, drop)...)
	if err == nil {
		args = append(args, "--restart", l.ckptDir)
	}
	fmt.Fprintf(stderr, "charmrun: the job cannot go on (%s); it runs again, once, %s\n", lost, from)
	code, lostAgain := runAgain(append(args, without(l.own, drop)...))
	if code != 0 && lostAgain != "" {
		fmt.Fprintf(stderr, "charmrun: the job ran again once already; it ends (%s)\n", lostAgain)
	}
	return code
}

// ownRuntimeFlags reads, among the program's arguments, the runtime
// flags charmrun acts on itself (the program takes runtime flags anywhere
// on its line, up to "--": a user who gives --ckpt-dir after the program
// means it as much as one who gives it before).
func (l *launchSpec) ownRuntimeFlags() error {
	for i := 0; i < len(l.own) && l.own[i] != "--"; i++ {
		name, val, hasValue := strings.Cut(l.own[i], "=")
		known, takesValue := chare.RuntimeFlag(name)
		if !known || !takesValue {
			continue
		}
		if !hasValue {
			if i+1 >= len(l.own) {
				return nil // (the program says what is missing)
			}
			i++
			val = l.own[i]
		}
		switch name {
		case "--ckpt-dir":
			l.ckptDir = val
		case "--listen":
			l.listen = val
		case "--connect-timeout":
			d, err := time.ParseDuration(val)
			if err != nil || d <= 0 {
				return fmt.Errorf("flag --connect-timeout: %q is not a positive duration (30s, 2m)", val)
			}
			l.timeout = d
		}
	}
	return nil
}

// without is flags (runtime flags) without those named in names, and
// their values, up to "--" (what follows is the program's alone).
func without(flags, names []string) []string {
	var out []string
	for i := 0; i < len(flags); i++ {
		if flags[i] == "--" {
			return append(out, flags[i:]...)
		}
		name, _, hasValue := strings.Cut(flags[i], "=")
		if slices.Contains(names, name) {
			if !hasValue {
				i++ // its value
			}
			continue
		}
		out = append(out, flags[i])
	}
	return out
}

// launchSpec is what charmrun was asked to run.
type launchSpec struct {
	prog     string
	progArgs []string // runtime flags to pass on, then the program's arguments
	layout   []string // the layout's flags in progArgs (+p, ++n, ++ppn)
	ckptDir  string   // --ckpt-dir's value, "" if none
	pass     []string // the runtime flags alone
	own      []string // the program's own arguments
	pes      int      // +p, 0 if not given
	procs    int
	ppn      int
	nodelist string
	shell    string
	listen   string
	timeout  time.Duration
	verbose  bool
}

// parse splits charmrun's own options, the runtime flags to pass on, the
// program and its arguments.
func parse(args []string) (launchSpec, error) {
	l := launchSpec{shell: "ssh"}
	var procs, ppn int
	i := 0
	value := func(a string) (string, error) {
		if i+1 >= len(args) {
			return "", fmt.Errorf("%s needs a value", a)
		}
		i++
		return args[i], nil
	}
	count := func(a, v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > chare.MaxPEs {
			return 0, fmt.Errorf("%s %s: want a whole number from 1 to %d", a, v, chare.MaxPEs)
		}
		return n, nil
	}
	for ; i < len(args); i++ {
		a := args[i]
		name, val, hasValue := strings.Cut(a, "=")
		var err error
		var v string
		switch {
		case a == "-h" || a == "--help" || a == "++help":
			return l, errHelp
		case a == "++local":
		case a == "++verbose":
			l.verbose = true
		case a == "++n" || a == "++p":
			if v, err = value(a); err == nil {
				procs, err = count(a, v)
			}
		case a == "++ppn":
			if v, err = value(a); err == nil {
				ppn, err = count(a, v)
			}
		case a == "++nodelist":
			l.nodelist, err = value(a)
		case a == "++remote-shell":
			l.shell, err = value(a)
			if err == nil && strings.TrimSpace(l.shell) == "" {
				err = fmt.Errorf("++remote-shell: empty command")
			}
		case strings.HasPrefix(a, "++"):
			return l, fmt.Errorf("unknown charmrun option %s (see --help)", a)
		case strings.HasPrefix(a, "+") || strings.HasPrefix(a, "-"):
			known, takesValue := chare.RuntimeFlag(name)
			if !known {
				return l, fmt.Errorf("unknown option %s before the program (see --help)", a)
			}
			flag := []string{a}
			if takesValue && !hasValue {
				if v, err = value(a); err != nil {
					return l, fmt.Errorf("flag %s needs a value", a)
				}
				val = v
				flag = append(flag, v)
			}
			switch {
			case strings.HasPrefix(name, "+p") && len(name) > 2, name == "+p" || name == "--pes" || name == "-pes":
				// charmrun passes the layout itself; the program checks
				// the value and says what is wrong with it
				if strings.HasPrefix(name, "+p") && len(name) > 2 {
					val = name[2:]
				}
				if n, err := strconv.Atoi(val); err == nil && n >= 1 && n <= chare.MaxPEs {
					l.pes = n
					continue
				}
			case name == "--listen":
				l.listen = val
			case name == "--ckpt-dir":
				l.ckptDir = val
			case name == "--connect-timeout":
				if l.timeout, err = time.ParseDuration(val); err != nil || l.timeout <= 0 {
					return l, fmt.Errorf("flag --connect-timeout: %q is not a positive duration (30s, 2m)", val)
				}
			}
			l.pass = append(l.pass, flag...)
		default:
			l.prog, l.own = a, args[i+1:]
			i = len(args)
			err = l.ownRuntimeFlags()
		}
		if err != nil {
			return l, err
		}
	}
	if l.prog == "" {
		return l, fmt.Errorf("no program to run (see --help)")
	}
	var err error
	if l.pes, l.procs, l.ppn, err = chare.Layout(l.pes, procs, ppn); err != nil {
		return l, err
	}
	if l.pes > 0 {
		l.layout = append(l.layout, "+p", strconv.Itoa(l.pes))
	}
	if l.procs > 1 || l.nodelist != "" {
		l.layout = append(l.layout, "++n", strconv.Itoa(l.procs), "++ppn", strconv.Itoa(l.ppn))
	}
	l.progArgs = append(append(slices.Clone(l.layout), l.pass...), l.own...)
	return l, nil
}

// resolve finds the program: a path as given, else on $PATH; a directory
// of Go files is built first (into a temporary directory cleanup removes).
func resolve(prog string, stderr io.Writer) (path string, cleanup func(), err error) {
	cleanup = func() {}
	if strings.ContainsRune(prog, filepath.Separator) {
		st, err := os.Stat(prog)
		if err != nil {
			return "", cleanup, fmt.Errorf("program %s: %w", prog, err)
		}
		if st.IsDir() {
			return build(prog, stderr)
		}
		if st.Mode()&0o111 == 0 {
			return "", cleanup, fmt.Errorf("program %s is not an executable file", prog)
		}
		return prog, cleanup, nil
	}
	p, err := exec.LookPath(prog)
	if err != nil {
		return "", cleanup, fmt.Errorf("program %s: not found (give a path, e.g. ./%s)", prog, prog)
	}
	return p, cleanup, nil
}

// build compiles the Go main package in dir with go build.
func build(dir string, stderr io.Writer) (string, func(), error) {
	if gos, _ := filepath.Glob(filepath.Join(dir, "*.go")); len(gos) == 0 {
		return "", func() {}, fmt.Errorf("program %s is a directory without Go files (give an executable or a main package)", dir)
	}
	tmp, err := os.MkdirTemp("", "charmrun-")
	if err != nil {
		return "", func() {}, err
	}
	cleanup := func() { os.RemoveAll(tmp) }
	bin := filepath.Join(tmp, filepath.Base(filepath.Clean(dir)))
	pkg := dir
	if !strings.HasPrefix(pkg, ".") && !filepath.IsAbs(pkg) {
		pkg = "./" + pkg
	}
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		cleanup()
		io.WriteString(stderr, out.String())
		return "", func() {}, fmt.Errorf("building %s: %v", dir, err)
	}
	return bin, cleanup, nil
}

// check runs a charmgo program once with chare.CheckEnv set, before a job
// of several processes starts, so that what every process would refuse
// (a flag, an argument, teams that do not fit the layout) is refused once,
// with the program's one line and exit code, and no process starts. It
// returns that code, or 0 (go on) — also for a program built without
// charmgo, which would not know the variable and would run.
func check(path string, args []string, stderr io.Writer) int {
	if !isCharmgo(path) {
		return 0
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), chare.CheckEnv+"=1")
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return ee.ExitCode()
	}
	return 0 // it checked, or could not: the job's processes will say
}

// isCharmgo reports whether the program at path was built with charmgo's
// runtime (its main module or a dependency).
func isCharmgo(path string) bool {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return false
	}
	if bi.Main.Path == charmgoModule {
		return true
	}
	for _, d := range bi.Deps {
		if d.Path == charmgoModule {
			return true
		}
	}
	return false
}

// charmgoModule is the runtime's module path.
const charmgoModule = "github.com/charmgo/charmgo"
