// Command charmrun launches a charmgo program with Charm++'s spellings:
//
//	charmrun +p4 ./leanmd 4 4 4 100
//
// Runtime flags given before the program (+pN, +p N, +balancer NAME,
// --pes N, …) are handed to it, as Charm++'s multicore charmrun does; the
// program parses them like its own command line. For now every PE runs in
// one process (++local, the default); launching several processes (++n,
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
)

const usage = `usage: charmrun [options] program [program arguments]

options:
  +pN, +p N              number of PEs, passed to the program
  +balancer NAME         load balancer, passed to the program
  --pes N, --wire-check, --lb NAME, --branching K, --spin N
                         any runtime flag, passed to the program
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
	path, err := resolve(prog)
	if err != nil {
		fmt.Fprintf(stderr, "charmrun: %v\n", err)
		return 2
	}
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
	withValue := map[string]bool{"+p": true, "+balancer": true, "--pes": true, "--lb": true, "--balancer": true, "--branching": true, "--spin": true}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
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
		case strings.HasPrefix(a, "+p") && len(a) > 2:
			pass = append(pass, a)
		case withValue[a] || withValue[strings.SplitN(a, "=", 2)[0]] && strings.Contains(a, "="):
			pass = append(pass, a)
			if !strings.Contains(a, "=") {
				if i+1 >= len(args) {
					return "", nil, false, fmt.Errorf("flag %s needs a value", a)
				}
				i++
				pass = append(pass, args[i])
			}
		case a == "--wire-check":
			pass = append(pass, a)
		case strings.HasPrefix(a, "+") || strings.HasPrefix(a, "-"):
			return "", nil, false, fmt.Errorf("unknown option %s before the program (see --help)", a)
		default:
			return a, append(pass, args[i+1:]...), verbose, nil
		}
	}
	return "", nil, false, fmt.Errorf("no program to run (see --help)")
}

// resolve finds the program: a path as given, else on $PATH.
func resolve(prog string) (string, error) {
	if strings.ContainsRune(prog, filepath.Separator) {
		st, err := os.Stat(prog)
		if err != nil {
			return "", fmt.Errorf("program %s: %w", prog, err)
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("program %s is not an executable file", prog)
		}
		return prog, nil
	}
	p, err := exec.LookPath(prog)
	if err != nil {
		return "", fmt.Errorf("program %s: not found (give a path, e.g. ./%s)", prog, prog)
	}
	return p, nil
}
