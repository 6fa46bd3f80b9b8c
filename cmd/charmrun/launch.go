package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/pe/cluster"
)

// exitGrace is how long the other processes have to end on their own once
// one failed (they learn it from the job's control plane and exit with
// its error); then charmrun kills them.
const exitGrace = 10 * time.Second

// child is one process of the job as charmrun sees it.
type child struct {
	rank int
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

// launch runs the job's processes: it serves their rendezvous with a
// fresh secret, starts them (here, or through the remote shell on the
// node list's hosts), and waits for them. The first to fail sets the exit
// code; if one fails before every process joined, or if not all joined
// within the connect timeout, charmrun ends the others. Whatever ends
// charmrun ends them too: children here die with it (Pdeathsig), and every
// process ends once its connection to the rendezvous does.
func (l launchSpec) launch(path string, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "charmrun: "+format+"\n", a...)
		return 1
	}
	var hosts []string
	if l.nodelist != "" {
		var err error
		if hosts, err = readNodelist(l.nodelist); err != nil {
			fmt.Fprintf(stderr, "charmrun: ++nodelist %s: %v\n", l.nodelist, err)
			return 2
		}
	}
	secret, err := cluster.NewSecret()
	if err != nil {
		return fail("%v", err)
	}
	host := l.listen
	if host == "" {
		host = "127.0.0.1"
	}
	srv, err := cluster.ServeRendezvous(host, secret, l.procs, nil)
	if err != nil {
		return fail("%v", err)
	}
	defer srv.Close()
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	out, errw := &lockedWriter{w: stdout}, &lockedWriter{w: stderr}
	env := []string{
		chare.ProcsEnv + "=" + strconv.Itoa(l.procs),
		chare.CharmrunEnv + "=" + srv.Addr(),
	}
	children := make([]*child, l.procs)
	exits := make(chan exit, l.procs)
	var wg sync.WaitGroup
	defer wg.Wait()
	for r := range children {
		c := &child{rank: r}
		if len(hosts) > 0 {
			c.host = hosts[r%len(hosts)]
		}
		vars := append(slicesClone(env), chare.RankEnv+"="+strconv.Itoa(r))
		if c.host == "" {
			c.cmd = exec.Command(path, l.progArgs...)
			c.cmd.Env = append(append(os.Environ(), vars...), cluster.SecretEnv+"="+secret.String())
		} else {
			c.cmd = remoteCommand(l.shell, c.host, path, l.progArgs, vars, secret)
		}
		c.cmd.Stdout, c.cmd.Stderr = out, errw
		// Pdeathsig: if charmrun dies, even by SIGKILL, so do the
		// children; their own process group: charmrun signals each whole.
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if l.verbose {
			fmt.Fprintf(errw, "charmrun: %v: %s\n", c, strings.Join(c.cmd.Args, " "))
		}
		if err := c.cmd.Start(); err != nil {
			killAll(children[:r])
			return fail("%v: start %s: %v", c, l.prog, err)
		}
		children[r] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			exits <- waitChild(c)
		}()
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)

	timeout := l.timeout
	if timeout <= 0 {
		timeout = cluster.DefaultConnectTimeout
	}
	joinTimer := time.NewTimer(timeout)
	defer joinTimer.Stop()
	joined := make([]bool, l.procs)
	nJoined, running := 0, l.procs
	code := 0
	var graceC <-chan time.Time
	for running > 0 {
		select {
		case r := <-srv.Joined():
			if !joined[r] {
				joined[r] = true
				if nJoined++; nJoined == l.procs {
					joinTimer.Stop()
				}
			}
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
			}
		case e := <-exits:
			running--
			if e.code == 0 {
				continue
			}
			if code == 0 {
				code = e.code
				switch {
				case nJoined < l.procs && !joined[e.c.rank]:
					fail("%v exited with code %d before it joined the job%s", e.c, e.code, unreachable(e))
					killAll(children)
				case e.signal != "":
					fail("%v was killed by %s", e.c, e.signal)
				}
				graceC = time.After(exitGrace)
			}
		case <-graceC:
			killAll(children)
		case s := <-sig:
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
			return exit{c: c, code: 128 + int(ws.Signal()), signal: ws.Signal().String()}
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
func remoteCommand(shell, host, path string, args, vars []string, secret cluster.Secret) *exec.Cmd {
	wd, _ := os.Getwd()
	var b strings.Builder
	fmt.Fprintf(&b, "cd %s && read -r %s && export %s && exec env", shellQuote(wd), cluster.SecretEnv, cluster.SecretEnv)
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

// readNodelist reads Charm++'s node list format: "group NAME [options]"
// starts a group, "host NAME [options]" adds a host to it; the hosts of
// group main are used. Blank lines and lines starting with # are skipped.
func readNodelist(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hosts []string
	group := "main"
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch fields[0] {
		case "group":
			if len(fields) < 2 {
				return nil, fmt.Errorf("line %d: group without a name", n)
			}
			group = fields[1]
		case "host":
			if len(fields) < 2 {
				return nil, fmt.Errorf("line %d: host without a name", n)
			}
			if group == "main" {
				hosts = append(hosts, fields[1])
			}
		default:
			return nil, fmt.Errorf("line %d: %q: want group NAME or host NAME", n, fields[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, errors.New("no host in group main")
	}
	return hosts, nil
}

// lockedWriter lets several children write one stream a write at a time.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }
