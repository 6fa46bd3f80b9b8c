// Command openatom runs the OpenAtom proxy on charmgo: the arrays, phases
// and messages of OpenAtom's Car–Parrinello step with real, checked math
// on small grids (see README.md):
//
//	openatom [states [grid [steps]]] [flags]
//
// with the defaults 32 16 20. --help lists the flags.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/charmgo/charmgo/apps/openatom/oa"
	"github.com/charmgo/charmgo/chare"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	p := oa.DefaultParams()
	flags := oa.Flags(&p)
	cfg, err := chare.ParseFlagsWith(args, flags)
	if errors.Is(err, chare.ErrHelp) {
		fmt.Println("usage: openatom [states [grid [steps]]] [flags]")
		fmt.Printf("  states: electronic states, %d to %d (default 32)\n", oa.MinStates, oa.MaxStates)
		fmt.Printf("  grid:   grid points a side, even, %d to %d (default 16)\n", oa.MinGrid, oa.MaxGrid)
		fmt.Printf("  steps:  Car–Parrinello steps (default 20)\n")
		fmt.Println("\nopenatom flags:")
		chare.WriteFlagUsage(os.Stdout, flags)
		fmt.Println()
		chare.WriteUsage(os.Stdout)
		return 0
	}
	if err == nil {
		err = oa.ParseArgs(cfg.Args, &p)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "openatom: %v\n", err)
		return 2
	}
	cfg.Notices = os.Stderr
	r, err := oa.Run(p, cfg, os.Stdout)
	if err != nil {
		return chare.ExitCode(os.Stderr, "openatom", err)
	}
	if r.Secondary || r.Checked {
		return 0
	}
	r.Summary(os.Stdout)
	return 0
}
