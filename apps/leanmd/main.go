// Command leanmd runs LeanMD, the Charm++ group's Lennard-Jones molecular
// dynamics mini-app, on charmgo:
//
//	leanmd [X Y Z [steps [firstLB [LBperiod [ckptPeriod]]]]] [flags]
//
// with the defaults 3 3 3 1001 20 20 100000. --help lists the flags.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/charmgo/charmgo/apps/leanmd/md"
	"github.com/charmgo/charmgo/chare"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	p := md.DefaultParams()
	flags := md.Flags(&p)
	cfg, err := chare.ParseFlagsWith(args, flags)
	if errors.Is(err, chare.ErrHelp) {
		fmt.Println("usage: leanmd [X Y Z [steps [firstLB [LBperiod [ckptPeriod]]]]] [flags]")
		fmt.Println("  defaults: 3 3 3 1001 20 20 100000")
		fmt.Println("\nleanmd flags:")
		chare.WriteFlagUsage(os.Stdout, flags)
		fmt.Println()
		chare.WriteUsage(os.Stdout)
		return 0
	}
	if err == nil {
		err = md.ParseArgs(cfg.Args, &p)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "leanmd: %v\n", err)
		return 2
	}
	cfg.Notices = os.Stderr
	r, err := md.Run(p, cfg, os.Stdout)
	if err != nil {
		return chare.ExitCode(os.Stderr, "leanmd", err)
	}
	if r.Secondary || r.Checked {
		return 0 // process 0 reports; a check runs nothing
	}
	r.Summary(os.Stdout)
	if !r.EnergyOK {
		return 1
	}
	return 0
}
