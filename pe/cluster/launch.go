package cluster

import (
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
	"sync"
	"syscall"
	"time"

	"github.com/charmgo/charmgo/internal/syncio"

	"golang.org/x/sys/unix"
)

// The environment a launcher gives each process of a job it starts.
const (
	RankEnv     = "CHARMGO_RANK"     // this process's number
	ProcsEnv    = "CHARMGO_PROCS"    // how many processes
	CharmrunEnv = "CHARMGO_CHARMRUN" // the rendezvous's address (Charmrun)
	// ReplacementEnv is set, to its incarnation (1, 2, …), in a process
	// started to replace a lost one: it joins the running job.
	ReplacementEnv = "CHARMGO_INCARNATION"
)

// maxReplacements bounds how many lost processes a job replaces: a
// process that keeps dying ends the job instead.
const maxReplacements = 16

// exitGrace is how long the other processes have to end on their own once
// one failed (they learn it from the job's control plane and exit with
// its error); then charmrun kills them.
const exitGrace = 10 * time.Second

// child is one process of the job as charmrun sees it.
type child struct {
	rank int
	inc  int    // 0, or which replacement of its rank it is
	host string // "" for this machine
	cmd  *exec.Cmd
}

func (c *child) String() string {
	if c.host == "" {
		return fmt.Sprintf("process %d", c.rank)
	}
	return fmt.Sprintf("process %d on %s", c.rank, c.host)
}

// exit is how a child ended.
type exit struct {
	c      *child
	code   int
	signal string
}

// Launch describes a job to start: Procs processes of the program at
// Path, each given Args.
type Launch struct {
	Path  string
	Args  []string
	Name  string // the program, for messages
	Procs int
	// Hosts, if any, are where the processes run, round robin, started
	// through Shell (default ssh); none: all on this machine.
	Hosts []string
	Shell string
	// Listen is the address the rendezvous listens on (default
	// 127.0.0.1); ConnectTimeout bounds the job's start (default
	// DefaultConnectTimeout).
	Listen         string
	ConnectTimeout time.Duration
	// Env is added to each process's environment.
	Env []string
	// Replace starts a replacement for a process killed by a signal
	// while the job runs (process 0 too, when the job has another to
	// take over from it: see Succession): the job recovers from the
	// loss, as Charm++'s ++local launcher does.
	Replace        bool
	Verbose        bool
	Stdout, Stderr io.Writer
}

// Run runs the job's processes: it serves their rendezvous with a
// fresh secret, starts them (here, or through the remote shell on the
// hosts), and waits for them; it returns the job's exit code. The first to fail sets the exit
// code; if one fails before every process joined, or if not all joined
// within the connect timeout, charmrun ends the others. Whatever ends
// charmrun ends them too: children here die with it (Pdeathsig), and every
// process ends once its connection to the rendezvous does.
func (l Launch) Run() int {
	code, _ := l.RunJob()
	return code
}

// RunJob is Run, and says whether the job ended because a process was
// lost (killed by a signal charmrun did not send) and not replaced: lost
// names it ("process 0 was killed by SIGKILL"), else it is empty.
func (l Launch) RunJob() (code int, lost string) {
	code = l.run(&lost)
	return code, lost
}

func (l Launch) run(lost *string) int {
	path := l.Path
	// charmrun's own lines and the children's output share the streams:
	// every write goes through one lock per stream
	out, errw := &syncio.Writer{W: l.Stdout}, &syncio.Writer{W: l.Stderr}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(errw, "charmrun: "+format+"\n", a...)
		return 1
	}
	hosts := l.Hosts
	if l.Shell == "" {
		l.Shell = "ssh"
	}
	secret, err := NewSecret()
	if err != nil {
		return fail("%v", err)
	}
	host := l.Listen
	if host == "" {
		host = "127.0.0.1"
	}
	srv, err := ServeRendezvous(host, secret, l.Procs, nil, 0)
	if err != nil {
		return fail("%v", err)
	}
	defer srv.Close()
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	env := append(slices.Clone(l.Env), ProcsEnv+"="+strconv.Itoa(l.Procs), CharmrunEnv+"="+srv.Addr())
	children := make([]*child, l.Procs)
	exits := make(chan exit, 2*l.Procs)
	var wg sync.WaitGroup
	defer wg.Wait()
	start := func(r, inc int) error {
		c := &child{rank: r, inc: inc}
		if len(hosts) > 0 {
			c.host = hosts[r%len(hosts)]
		}
		vars := append(slices.Clone(env), RankEnv+"="+strconv.Itoa(r))
		if inc > 0 {
			vars = append(vars, ReplacementEnv+"="+strconv.Itoa(inc))
		}
		if c.host == "" {
			c.cmd = exec.Command(path, l.Args...)
			c.cmd.Env = append(append(os.Environ(), vars...), SecretEnv+"="+secret.String())
		} else {
			c.cmd = remoteCommand(l.Shell, c.host, path, l.Args, vars, secret)
		}
		c.cmd.Stdout, c.cmd.Stderr = out, errw
		// Pdeathsig: if charmrun dies, even by SIGKILL, so do the
		// children; their own process group: charmrun signals each whole.
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if l.Verbose {
			fmt.Fprintf(errw, "charmrun: %v: %s\n", c, strings.Join(c.cmd.Args, " "))
		}
		if err := c.cmd.Start(); err != nil {
			return fmt.Errorf("%v: start %s: %v", c, l.Name, err)
		}
		children[r] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			exits <- waitChild(c)
		}()
		return nil
	}
	for r := range children {
		if err := start(r, 0); err != nil {
			killAll(children[:r])
			return fail("%v", err)
		}
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)

	timeout := l.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	joinTimer := time.NewTimer(timeout)
	defer joinTimer.Stop()
	joined := make([]bool, l.Procs)
	// in: the process of each rank is in the job and knows it (it joined
	// at the start, or the steward admitted it and it has the job's
	// list: Listed) and has not exited. A lost process is replaced only
	// while another is in: none is left to admit it, or to take over from
	// a lost steward, otherwise (a replacement admitted whose list never
	// came cannot: it knows nobody).
	in := make([]bool, l.Procs)
	nJoined, running, replaced := 0, l.Procs, 0
	// ended: a process exited with 0, so the job ended (process 0
	// released the others): a process lost now is not replaced, and a
	// replacement still joining has no job to join (it would wait for
	// a steward's address until its connect timeout); dismissed: such
	// a replacement, ended by charmrun
	ended := false
	dismissed := map[*child]bool{}
	code := 0
	killed := false // charmrun ended the children itself: their signals are its own
	var graceC <-chan time.Time
	onJoined := func(r int) {
		if !joined[r] {
			joined[r], in[r] = true, true
			if nJoined++; nJoined == l.Procs {
				joinTimer.Stop()
			}
		}
	}
	for running > 0 {
		select {
		case r := <-srv.Listed():
			in[r] = true
		case m := <-srv.Suspected():
			// the rendezvous named its successor: it is lost, and is
			// replaced as such (its exit by SIGKILL), if it still runs
			// (most often it died, and its exit says so)
			if c := children[m.Rank]; c != nil && c.inc == m.Inc && c.cmd.Process != nil && !ended {
				if m.Hung {
					fmt.Fprintf(errw, "charmrun: %v hangs (no heartbeat), on a host no other process of the job shares; charmrun ends it, to be replaced\n", c)
				}
				syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			}
		case r := <-srv.Joined():
			onJoined(r)
		case <-joinTimer.C:
			var missing []string
			for r, ok := range joined {
				if !ok {
					missing = append(missing, children[r].String())
				}
			}
			if code == 0 && len(missing) > 0 {
				fail("%s did not join the job within %v (--connect-timeout)", strings.Join(missing, ", "), timeout)
				code = 1
				killAll(children)
				killed = true
			}
		case e := <-exits:
			if e.c != children[e.c.rank] {
				continue // a lost incarnation, replaced already
			}
			// (a process connects, or has its list, before it can exit:
			// what came before its exit counts first)
			for drained := false; !drained; {
				select {
				case r := <-srv.Listed():
					in[r] = true
				case r := <-srv.Joined():
					onJoined(r)
				default:
					drained = true
				}
			}
			in[e.c.rank] = false
			if dismissed[e.c] {
				running--
				continue
			}
			if l.Replace && e.signal != "" && code == 0 && !ended && nJoined == l.Procs && slices.Contains(in, true) && replaced < maxReplacements {
				replaced++
				fmt.Fprintf(errw, "charmrun: %v was killed by %s; starting its replacement\n", e.c, e.signal)
				if err := start(e.c.rank, e.c.inc+1); err == nil {
					continue
				} else {
					fail("%v", err)
				}
			}
			running--
			if e.code == 0 {
				if !ended {
					ended = true
					for r, c := range children {
						if c != nil && c.inc > 0 && !in[r] && c != e.c && c.cmd.Process != nil {
							dismissed[c] = true
							syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
						}
					}
				}
				continue
			}
			before := nJoined < l.Procs && !joined[e.c.rank]
			switch {
			case before && code == 0:
				fail("%v exited with code %d before it joined the job%s", e.c, e.code, unreachable(e))
			case e.signal != "" && !killed:
				// the cause, whatever another process that noticed it
				// said or did first (and whichever exit came first here)
				what := fmt.Sprintf("%v was killed by %s", e.c, e.signal)
				fail("%s", what)
				if *lost == "" {
					*lost = what
				}
			}
			if code == 0 {
				code = e.code
				if before || !slices.Contains(in, true) {
					// (none in the job is left to end the others: a
					// replacement waits for a steward that will not come)
					killAll(children)
					killed = true
				}
				graceC = time.After(exitGrace)
			}
		case <-graceC:
			killAll(children)
			killed = true
		case s := <-sig:
			killed = true
			for _, c := range children {
				if c.cmd.Process != nil {
					syscall.Kill(-c.cmd.Process.Pid, s.(syscall.Signal))
				}
			}
			if code == 0 {
				code = 128 + int(s.(syscall.Signal))
			}
			graceC = time.After(exitGrace)
		}
	}
	return code
}

func unreachable(e exit) string {
	if e.c.host != "" && e.code == 255 {
		return " (the remote shell could not reach the host?)"
	}
	return ""
}

func waitChild(c *child) exit {
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return exit{c: c, code: 128 + int(ws.Signal()), signal: unix.SignalName(ws.Signal())}
		}
		return exit{c: c, code: ee.ExitCode()}
	}
	if err != nil {
		return exit{c: c, code: 1}
	}
	return exit{c: c}
}

// killAll ends every started child and everything it started.
func killAll(cs []*child) {
	for _, c := range cs {
		if c != nil && c.cmd.Process != nil {
			syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

// remoteCommand runs the program on host through the remote shell. The
// secret goes through the shell's standard input, never on a command line
// (which ps shows on both hosts).
func remoteCommand(shell, host, path string, args, vars []string, secret Secret) *exec.Cmd {
	wd, _ := os.Getwd()
	var b strings.Builder
	fmt.Fprintf(&b, "cd %s && read -r %s && export %s && exec env", shellQuote(wd), SecretEnv, SecretEnv)
	for _, v := range vars {
		b.WriteString(" " + shellQuote(v))
	}
	b.WriteString(" " + shellQuote(path))
	for _, a := range args {
		b.WriteString(" " + shellQuote(a))
	}
	argv := append(strings.Fields(shell), host, b.String())
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(secret.String() + "\n")
	return cmd
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
