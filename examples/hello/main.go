// Command hello is the smallest charmgo program: main creates a 1D array of
// greeters, broadcasts to them, and gathers their greetings (in index order)
// with a reduction whose callback is main.
//
//	go run ./examples/hello            # all cores
//	go run ./examples/hello +p3 10     # 3 PEs, 10 greeters
package main

import (
	"fmt"
	"strconv"

	"github.com/charmgo/charmgo/chare"
)

// Main is the main chare: it runs on PE 0.
type Main struct{}

// Greeter is one element of the array.
type Greeter struct{}

var (
	mainType = chare.NewMainType[Main]("hello.Main")
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

// Init is main's constructor: args are the program's arguments after the
// runtime's flags.
func (m *Main) Init(ctx *chare.Ctx, args []string) {
	n := 8
	if len(args) > 0 {
		v, err := strconv.Atoi(args[0])
		if err != nil || v < 1 {
			ctx.Fail(fmt.Errorf("argument 1: %q is not a positive number of greeters", args[0]))
			return
		}
		n = v
	}
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

func main() { chare.Main(mainType) }
