package md

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/charmgo/charmgo/chare"
)

func TestZZProf(t *testing.T) {
	args := os.Getenv("ARGS")
	if args == "" {
		t.Skip()
	}
	p := DefaultParams()
	cfg, err := chare.ParseFlagsWith(strings.Fields(args), Flags(&p))
	if err != nil {
		t.Fatal(err)
	}
	if err := ParseArgs(cfg.Args, &p); err != nil {
		t.Fatal(err)
	}
	cfg.Balancer = "rotate"
	r, err := Run(p, cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r.Summary(os.Stderr)
}
