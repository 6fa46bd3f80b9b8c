package chare_test

import (
	"fmt"
	"strings"

	"github.com/charmgo/charmgo/chare"
)

// A 1D array of greeters; each says hello and the greetings are gathered, in
// index order, by a Concat reduction to main.
type Greeter struct{}

type HelloMain struct{}

var (
	helloMain  = chare.NewMainType[HelloMain]("example.HelloMain")
	greeters   = chare.NewType[Greeter, struct{}]("example.Greeter")
	sayHello   *chare.Entry[Greeter, string]
	helloDone  *chare.Entry[HelloMain, []string]
	concatStrs = chare.Concat[string]()
)

func init() {
	sayHello = chare.NewEntry(greeters, (*Greeter).SayHello)
	helloDone = chare.NewEntry(helloMain, (*HelloMain).Done)
}

func (m *HelloMain) Init(ctx *chare.Ctx, args []string) {
	arr := greeters.NewArray(ctx, []int{5}, struct{}{})
	sayHello.Broadcast(ctx, arr, "hello")
}

func (g *Greeter) Init(ctx *chare.Ctx, _ struct{}) {}

func (g *Greeter) SayHello(ctx *chare.Ctx, word string) {
	msg := fmt.Sprintf("%s from %v", word, ctx.Index())
	chare.Contribute(ctx, concatStrs, msg, helloDone.CallbackTo(helloMain.MainProxy()))
}

func (m *HelloMain) Done(ctx *chare.Ctx, all []string) {
	sayln(strings.Join(all, "\n"))
	ctx.Exit(0)
}

func Example_hello() {
	res := chare.Run(helloMain, chare.Config{PEs: 3})
	fmt.Println("exit", res.Code, res.Err)
	// Output:
	// hello from [0]
	// hello from [1]
	// hello from [2]
	// hello from [3]
	// hello from [4]
	// exit 0 <nil>
}
