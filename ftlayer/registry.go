package ftlayer

import (
	"fmt"
	"slices"
	"strings"
)

// ProtocolSpec is a fault-tolerance protocol as the runtime selects it: by
// name, with what its recovery does and the hook it runs on each PE. The
// runtime asks these questions instead of testing protocol names.
type ProtocolSpec struct {
	Name string
	// RecoversAlone: a failed PE recovers alone from its checkpoint while
	// the others replay its messages to it (message logging); otherwise
	// every PE rolls back to the last checkpoint. A recovery by replay
	// makes the PE's own decisions again, so a decision taken from a
	// clock (a checkpoint cadence in time) would come out otherwise.
	RecoversAlone bool
	// Teams: the protocol logs by teams (Teams), and a failed PE's whole
	// team recovers, alone, while the others replay their messages to it.
	// WithTeams: it may (camel, as camel+teams).
	Teams, WithTeams bool
	// LogLimit: the protocol honours a limit on each PE's log (MCML:
	// HookConfig.Limit).
	LogLimit bool
	// AnySet: any PEs failing at once recover together, each alone (the
	// others never roll back); the protocol's hooks need an event logger
	// (HookConfig.Events).
	AnySet bool
	// JointTeams: teams failing at once recover together, as one set (the
	// protocol's recovery takes messages between them as made again by
	// their re-execution).
	JointTeams bool
	// NewHook makes PE me's hook for a job of n PEs, whose trees t
	// describes, whose net carries the hook's packets, as c says.
	NewHook func(me, n int, t Trees, net func(dst int, p *Packet), c HookConfig) Hook
}

var protocols = []ProtocolSpec{
	{Name: "none", NewHook: func(int, int, Trees, func(int, *Packet), HookConfig) Hook { return NopHook{} }},
	{Name: "scmel", RecoversAlone: true, LogLimit: true, NewHook: causalHook("scmel", false)},
	{Name: "camel", RecoversAlone: true, WithTeams: true, LogLimit: true, NewHook: causalHook("camel", true)},
	// team: SCMEL between teams; inside one, reception order only
	{Name: "team", RecoversAlone: true, Teams: true, LogLimit: true, NewHook: causalHook("team", false)},
	{Name: "pessimist", RecoversAlone: true, AnySet: true, NewHook: func(me, n int, _ Trees, net func(int, *Packet), c HookConfig) Hook {
		return NewPessimistHook(me, n, net, c.Events)
	}},
	// spmd: team logging without determinants (docs/SPMD.md)
	{Name: "spmd", RecoversAlone: true, Teams: true, JointTeams: true, NewHook: func(me, n int, t Trees, net func(int, *Packet), c HookConfig) Hook {
		namer, _ := t.(Namer)
		return NewSPMDHook(me, n, c.Teams, namer, net)
	}},
}

func causalHook(name string, camel bool) func(me, n int, t Trees, net func(int, *Packet), c HookConfig) Hook {
	return func(me, n int, t Trees, net func(int, *Packet), c HookConfig) Hook {
		hk := &CausalHook{name: name, s: NewHopCausal(int32(me), n, t, camel, c.Limit).withTeams(c.Teams), t: t, net: net, lim: c.Limit}
		if camel && c.Teams.On() {
			hk.name = name + "+teams"
		}
		return hk
	}
}

// LookupProtocol returns the protocol named name (any case; "" is none).
func LookupProtocol(name string) (ProtocolSpec, error) {
	if name == "" {
		name = "none"
	}
	for _, p := range protocols {
		if strings.EqualFold(p.Name, name) {
			return p, nil
		}
	}
	return ProtocolSpec{}, fmt.Errorf("unknown protocol %q (want %s)", name, strings.Join(ProtocolNames(), ", "))
}

// ProtocolNames lists the protocols' names.
func ProtocolNames() []string {
	out := make([]string, len(protocols))
	for i, p := range protocols {
		out[i] = p.Name
	}
	return slices.Clip(out)
}
