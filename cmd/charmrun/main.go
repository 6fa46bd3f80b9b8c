// Command charmrun launches a charmgo program with Charm++'s spellings:
//
//	charmrun +p4 ./leanmd 4 4 4 100
//	charmrun +p2 ./apps/leanmd 2 2 2 10   # a package directory: built first
//
// Every runtime flag given before the program (+pN, +p N, +balancer NAME,
// --ft P, --kill PE@STEP, --ckpt-dir DIR, --restart DIR, --watchdog D, …)
// is handed to it, as Charm++'s multicore charmrun does; the program
// parses them like its own command line. For now every PE runs in one
// process (++local, the default); launching several processes (++n,
// ++ppn, ++nodelist) comes with the multi-process transport.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/charmgo/charmgo/chare"
)

const usage = `usage: charmrun [options] program [program arguments]

program: an executable (a path, or a name on $PATH), or the directory of a
Go main package (./apps/leanmd), which charmrun builds first with go build.

options:
  +pN, +p N              number of PEs, passed to the program
  +balancer NAME         load balancer, passed to the program
  --pes N, --wire-check, --ft P, --kill PE@STEP, --ckpt-dir DIR, --restart DIR,
  --watchdog D, ...      any runtime flag (see the program's --help), passed
                         to the program
  ++local                run every PE in this machine's one process (the default)
  ++n N, ++ppn N, ++nodelist FILE
                         several processes: not available yet (one process only)
  ++verbose              print the command before running it
  -h, --help             this text
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	prog, progArgs, verbose, err := parse(args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "charmrun: %v\n", err)
		return 2
	}
	path, cleanup, err := resolve(prog, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "charmrun: %v\n", err)
		return 2
	}
	defer cleanup()
	if verbose {
		fmt.Fprintf(stderr, "charmrun: %s %s\n", path, strings.Join(progArgs, " "))
	}
	cmd := exec.Command(path, progArgs...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "charmrun: start %s: %v\n", prog, err)
		return 1
	}
	// Pass interrupts on, so ^C ends the program the way it would end alone.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		for s := range sig {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	signal.Stop(sig)
	close(sig)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		fmt.Fprintf(stderr, "charmrun: %s: %v\n", prog, err)
		return 1
	}
	return 0
}

var errHelp = errors.New("help")

// parse splits charmrun's own options, the runtime flags to pass on, the
// program and its arguments.
func parse(args []string) (prog string, progArgs []string, verbose bool, err error) {
	var pass []string
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(a, "=")
		switch {
		case a == "-h" || a == "--help" || a == "++help":
			return "", nil, false, errHelp
		case a == "++local":
		case a == "++verbose":
			verbose = true
		case a == "++n" || a == "++ppn" || a == "++nodelist" || a == "++p":
			if i+1 >= len(args) {
				return "", nil, false, fmt.Errorf("%s needs a value", a)
			}
			i++
			if (a == "++n" || a == "++p") && args[i] == "1" {
				continue
			}
			return "", nil, false, fmt.Errorf("%s %s: several processes are not available yet; run every PE in one process with +pN", a, args[i])
		case strings.HasPrefix(a, "++"):
			return "", nil, false, fmt.Errorf("unknown charmrun option %s (see --help)", a)
		case strings.HasPrefix(a, "+") || strings.HasPrefix(a, "-"):
			known, takesValue := chare.RuntimeFlag(name)
			if !known {
				return "", nil, false, fmt.Errorf("unknown option %s before the program (see --help)", a)
			}
			pass = append(pass, a)
			if takesValue && !hasValue {
				if i+1 >= len(args) {
					return "", nil, false, fmt.Errorf("flag %s needs a value", a)
				}
				i++
				pass = append(pass, args[i])
			}
		default:
			return a, append(pass, args[i+1:]...), verbose, nil
		}
	}
	return "", nil, false, fmt.Errorf("no program to run (see --help)")
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
