package loadbalance

import (
	"fmt"
	"slices"
	"strings"
)

// Strategy decides a balancing step: a pure function of the stats (and of
// its options), so that a step replayed offline from a dump plans the same
// moves as the live run did.
type Strategy interface {
	// Name is the strategy's registered name.
	Name() string
	// Plan returns the moves to make. It never moves a non-migratable
	// object or to a PE that does not exist or is unavailable.
	Plan(st *Stats) []Move
}

// Options tune the built-in strategies.
type Options struct {
	// Tolerance is how far above the average load a PE may stay before
	// refine moves work off it, and the imbalance greedyrefine and graph
	// accept to move less or to cut less. Default 0.03.
	Tolerance float64
	// Seed makes random choices (random, graph's partitioner) repeatable;
	// it is mixed with the step number.
	Seed uint64
}

func (o Options) withDefaults() Options {
	if o.Tolerance <= 0 {
		o.Tolerance = 0.03
	}
	return o
}

type builtin struct {
	name    string
	aliases []string // Charm++'s names
	about   string
	make    func(Options) Strategy
}

func builtins() []builtin {
	return []builtin{
		{"greedy", []string{"GreedyLB"}, "heaviest chare first onto the least-loaded PE; ignores where chares are", func(o Options) Strategy { return greedy{} }},
		{"refine", []string{"RefineLB"}, "moves chares off PEs above average load until all are within tolerance; moves few", func(o Options) Strategy { return refine{tol: o.Tolerance} }},
		{"greedyrefine", []string{"GreedyRefineLB"}, "greedy, but a chare stays where it is if that PE stays within tolerance of greedy's maximum", func(o Options) Strategy { return greedyRefine{tol: o.Tolerance} }},
		{"graph", []string{"MetisLB"}, "partitions the communication graph (multilevel bisection) to cut bytes between PEs within a load tolerance", func(o Options) Strategy { return graph{tol: o.Tolerance, seed: o.Seed} }},
		{"random", []string{"RandCentLB"}, "every chare to a random PE (seeded)", func(o Options) Strategy { return random{seed: o.Seed} }},
		{"rotate", []string{"RotateLB"}, "every chare to the next PE (a test of migration)", func(o Options) Strategy { return rotate{} }},
		{"dummy", []string{"DummyLB"}, "no moves (measures the cost of a balancing step)", func(o Options) Strategy { return dummy{} }},
	}
}

// Names lists the built-in strategies with their Charm++ names and what
// each does, for help texts.
func Names() []string {
	var out []string
	for _, b := range builtins() {
		out = append(out, fmt.Sprintf("%s (%s): %s", b.name, strings.Join(b.aliases, ", "), b.about))
	}
	return out
}

// New builds the strategy called name: a built-in name or Charm++'s
// (case does not matter).
func New(name string, opt Options) (Strategy, error) {
	opt = opt.withDefaults()
	for _, b := range builtins() {
		if strings.EqualFold(name, b.name) || slices.ContainsFunc(b.aliases, func(a string) bool { return strings.EqualFold(a, name) }) {
			return b.make(opt), nil
		}
	}
	var known []string
	for _, b := range builtins() {
		known = append(known, b.name)
		known = append(known, b.aliases...)
	}
	return nil, fmt.Errorf("unknown load balancer %q (known: %s)", name, strings.Join(known, ", "))
}

// Chain is the strategies of several +balancer flags: as in Charm++, the
// first runs at the first balancing step, the second at the next, and the
// last at every step after.
type Chain []Strategy

// At is the strategy of balancing step (from 1), or nil for an empty
// chain.
func (c Chain) At(step int) Strategy {
	if len(c) == 0 {
		return nil
	}
	return c[min(max(step, 1), len(c))-1]
}

// NewChain builds a chain from names: each a strategy of own's (by its
// Name, case aside) or else a built-in.
func NewChain(names []string, opt Options, own ...Strategy) (Chain, error) {
	var c Chain
	for _, n := range names {
		if i := slices.IndexFunc(own, func(s Strategy) bool { return strings.EqualFold(s.Name(), n) }); i >= 0 {
			c = append(c, own[i])
			continue
		}
		s, err := New(n, opt)
		if err != nil && len(own) > 0 {
			var mine []string
			for _, o := range own {
				mine = append(mine, o.Name())
			}
			err = fmt.Errorf("%w, or the program's: %s", err, strings.Join(mine, ", "))
		}
		if err != nil {
			return nil, err
		}
		c = append(c, s)
	}
	return c, nil
}

// Run plans a step with s and checks the plan: a strategy that breaks its
// contract is reported, not obeyed.
func Run(s Strategy, st *Stats) ([]Move, error) {
	if err := st.Validate(); err != nil {
		return nil, err
	}
	moves := s.Plan(st)
	if err := st.CheckPlan(moves); err != nil {
		return nil, fmt.Errorf("load balancer %s: %w", s.Name(), err)
	}
	return moves, nil
}
