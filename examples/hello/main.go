// Command hello is the smallest charmgo program: main creates a 1D array of
// greeters, broadcasts to them, and gathers their greetings (in index order)
// with a reduction whose callback is main.
//
//	go run ./examples/hello            # all cores, 8 greeters
//	go run ./examples/hello +p3 10     # 3 PEs, 10 greeters
//	go run ./examples/hello --help
package main

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/charmgo/charmgo/chare"
)

// Main is the main chare: it runs on PE 0.
type Main struct{}

// Greeter is one element of the array.
type Greeter struct{}

var (
	mainType = chare.NewMainTypeOf[Main, int]("hello.Main")
	greeters = chare.NewType[Greeter, string]("hello.Greeter")
	greet    *chare.Entry[Greeter, int]
	done     *chare.Entry[Main, []string]
	// gather collects the greetings in index order; reducers are declared
	// at package level, like types and entries, so every process knows them
	gather = chare.Concat[string]()
)

func init() {
	greet = chare.NewEntry(greeters, (*Greeter).Greet)
	done = chare.NewEntry(mainType, (*Main).Done)
}

// Init is main's constructor: n is the number of greeters.
func (m *Main) Init(ctx *chare.Ctx, n int) {
	fmt.Printf("hello: %d greeters on %d PEs\n", n, ctx.NumPEs())
	arr := greeters.NewArray(ctx, []int{n}, "hello")
	greet.Broadcast(ctx, arr, 2026)
}

// Init is each greeter's constructor.
func (g *Greeter) Init(ctx *chare.Ctx, word string) {}

// Greet contributes this element's greeting to a reduction to main.
func (g *Greeter) Greet(ctx *chare.Ctx, year int) {
	s := fmt.Sprintf("greeter %v on PE %d says hello in %d", ctx.Index(), ctx.PE(), year)
	chare.Contribute(ctx, gather, s, done.CallbackTo(mainType.MainProxy()))
}

// Done receives every greeting, in index order.
func (m *Main) Done(ctx *chare.Ctx, all []string) {
	for _, s := range all {
		fmt.Println(s)
	}
	ctx.Exit(0)
}

// greetersArg reads the command line's arguments: [greeters].
func greetersArg(args []string) (int, error) {
	switch len(args) {
	case 0:
		return 8, nil
	case 1:
		v, err := strconv.Atoi(args[0])
		if err != nil || v < 1 {
			return 0, fmt.Errorf("argument 1: %q is not a positive number of greeters", args[0])
		}
		return v, nil
	}
	return 0, fmt.Errorf("%d arguments: hello takes one, the number of greeters", len(args))
}

func main() {
	fs := flag.NewFlagSet("hello", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: hello [greeters]: greeters (default 8) say hello, gathered in index order by a reduction to main")
	}
	chare.MainWith(mainType, fs, greetersArg)
}
