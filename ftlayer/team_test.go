package ftlayer

import (
	"testing"

	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

func TestTeamsAssignments(t *testing.T) {
	b, err := BlockTeams(5, 2)
	require.NoError(t, err)
	require.True(t, b.On())
	require.Equal(t, 3, b.K())
	require.Equal(t, "{0-1} {2-3} {4}", b.String())
	require.Equal(t, []int32{2, 3}, b.Members(3))
	require.True(t, b.Same(2, 3))
	require.False(t, b.Same(1, 2))
	require.Equal(t, 2, b.Largest())

	var alone Teams
	require.False(t, alone.On())
	require.True(t, alone.Same(3, 3))
	require.False(t, alone.Same(3, 4))
	require.Equal(t, []int32{3}, alone.Members(3))
	require.Equal(t, 1, alone.Size(3))

	odd, err := TeamsOf([]int32{1, 0, 1, 0})
	require.NoError(t, err)
	require.Equal(t, "{1,3} {0,2}", odd.String())

	for _, c := range []struct {
		of  []int32
		err string
	}{
		{[]int32{0, 2, 2}, "team 1 has no PE (teams are numbered 0..2 without gaps)"},
		{[]int32{0, -1}, "PE 1 in team -1, outside 0..1"},
		{[]int32{0, 5}, "PE 1 in team 5, outside 0..1"},
	} {
		_, err := TeamsOf(c.of)
		require.EqualError(t, err, c.err)
	}
	_, err = BlockTeams(4, 0)
	require.EqualError(t, err, "teams of 0 PEs")
	require.Equal(t, "{0-3,6,8-9}", PEList([]int32{0, 1, 2, 3, 6, 8, 9}))
}

// teamNet is four PEs in teams {0,1} and {2,3} under team-based logging,
// passing point-to-point messages by hand.
type teamNet struct {
	t     *testing.T
	hooks []*CausalHook
	pkts  []Packet
}

func newTeamNet(t *testing.T) *teamNet {
	teams, err := BlockTeams(4, 2)
	require.NoError(t, err)
	spec, err := LookupProtocol("team")
	require.NoError(t, err)
	n := &teamNet{t: t}
	for i := 0; i < 4; i++ {
		n.hooks = append(n.hooks, spec.NewHook(i, 4, NewGroups(), func(dst int, p *Packet) { n.pkts = append(n.pkts, *p) }, HookConfig{Teams: teams}).(*CausalHook))
	}
	return n
}

// send stamps a message from PE a to PE b and hands it over.
func (n *teamNet) send(a, b int) pe.Envelope {
	env := pe.Envelope{Type: 1, Kind: pe.KindP2P, Payload: []byte{byte(a), byte(b)}}
	require.NoError(n.t, n.hooks[a].Send(b, RoleP2P, 0, 0, false, &env))
	got, err := n.hooks[b].Arrive(&env)
	require.NoError(n.t, err)
	require.Equal(n.t, Handle, got)
	return env
}

func (n *teamNet) flush() {
	for _, h := range n.hooks {
		h.Idle()
	}
	for len(n.pkts) > 0 {
		p := n.pkts[0]
		n.pkts = n.pkts[1:]
		require.NoError(n.t, n.hooks[p.To].Packet(&p))
	}
}

// A message inside a team is not logged; its reception's determinant
// travels on, with the teammate's own, to whatever leaves the team, and
// is safe (dropped by its owner) only once a PE of another team holds it.
func TestTeamDeterminantsLeaveTheTeamBeforeTheyAreSafe(t *testing.T) {
	n := newTeamNet(t)
	n.send(2, 0) // PE 0's reception 1, from the other team: logged at 2
	n.send(0, 1) // inside the team: carries 0's determinant; not logged
	require.Equal(t, uint64(1), n.hooks[2].Stats().Log[KindP2P].Msgs)
	require.Zero(t, n.hooks[0].Stats().Log[KindP2P].Msgs, "a message to a teammate is logged")
	require.Equal(t, uint64(1), n.hooks[0].Stats().NotLogged[KindP2P].TotalMsgs)
	n.flush()
	require.Len(t, n.hooks[0].s.detBuf, 1, "a teammate's acknowledgement made a determinant safe")

	env := n.send(1, 3) // leaves the team: PE 1's own determinant and 0's
	var owners []int32
	for _, d := range env.FT.Dets {
		owners = append(owners, d.Recver)
	}
	require.Equal(t, []int32{1, 0}, owners)
	n.flush()
	require.Empty(t, n.hooks[0].s.detBuf, "PE 3's acknowledgement reached PE 0")
	require.Empty(t, n.hooks[1].s.detBuf)
	require.ElementsMatch(t, []Det{{Sender: 2, Recver: 0, SSN: 1, RSN: 1}, {Sender: 0, Recver: 1, SSN: 1, RSN: 1}}, n.hooks[3].s.detLog)

	// PE 1's next message to PE 3 still relays what PE 0 last sent it
	// (PE 1 hears that it is safe only from PE 0's next message)
	env = n.send(1, 3)
	require.Len(t, env.FT.Dets, 1)
	require.Equal(t, int32(0), env.FT.Dets[0].Recver)
	n.send(0, 1) // PE 0 has nothing unsafe: PE 1 relays nothing more
	env = n.send(1, 3)
	require.Len(t, env.FT.Dets, 1, "PE 1's own reception from PE 0")
	require.Equal(t, int32(1), env.FT.Dets[0].Recver)
}

// When team {0,1} fails, the other team sends each of its PEs the
// determinants of its receptions and the messages it logged for it, and
// nothing of what stayed inside the team; the PEs recover together,
// replaying the receptions in their recorded order.
func TestTeamRecoversFromTheOtherTeam(t *testing.T) {
	n := newTeamNet(t)
	n.send(2, 0)
	n.send(0, 1)
	n.send(3, 1)
	n.send(1, 2) // carries PE 1's determinants (2) and PE 0's (1)
	n.flush()
	for _, p := range []int32{0, 1} {
		n.hooks[p].Restart(nil, 1, nil, Rollback{})
	}
	for _, p := range []int32{0, 1} {
		require.NoError(t, n.hooks[p].PeerFailed(int(1-p), 1, nil), "a teammate's failure")
		require.True(t, n.hooks[p].Recovering())
	}
	var replayed []Packet
	n.pkts = nil
	for _, s := range []int{2, 3} {
		for _, y := range []int{0, 1} {
			require.NoError(t, n.hooks[s].PeerFailed(y, 1, nil))
		}
	}
	require.Equal(t, []int32{0, 1}, n.hooks[2].s.failing)
	// another team's PE may not fail while this one recovers
	_, perr := n.hooks[0].s.PeerFailed(2, 1, nil)
	require.ErrorIs(t, perr, ErrConcurrentFailure)
	for _, p := range n.pkts {
		if p.Kind == PktApp {
			replayed = append(replayed, p)
		}
	}
	require.Len(t, replayed, 2, "the two messages the other team sent into the team: nothing sent inside it")
	// the recovery packets and replays reach the team; the messages
	// inside it are made again by its re-execution
	for len(n.pkts) > 0 {
		p := n.pkts[0]
		n.pkts = n.pkts[1:]
		if p.Kind == PktApp {
			env := *p.Msg.Env
			_, err := n.hooks[p.To].Arrive(&env)
			require.NoError(t, err)
			continue
		}
		require.NoError(t, n.hooks[p.To].Packet(&p))
	}
	// (the runtime asks for held messages after every envelope)
	var held pe.Envelope
	require.True(t, n.hooks[0].Next(&held), "PE 2's message, replayed")
	require.Equal(t, int32(2), held.FT.Sender)
	require.False(t, n.hooks[1].Next(&held), "PE 3's message waits for PE 0's, which came first")
	// PE 0 handled 2's message; PE 1 holds 3's until 0's message comes
	require.False(t, n.hooks[0].Recovering())
	require.True(t, n.hooks[1].Recovering())
	env := pe.Envelope{Type: 1, Kind: pe.KindP2P, Payload: []byte{0, 1}}
	require.NoError(t, n.hooks[0].Send(1, RoleP2P, 0, 0, false, &env))
	got, err2 := n.hooks[1].Arrive(&env)
	require.NoError(t, err2)
	require.Equal(t, Handle, got, "PE 0's message is PE 1's recorded reception 1")
	var next pe.Envelope
	require.True(t, n.hooks[1].Next(&next), "then PE 3's")
	require.Equal(t, int32(3), next.FT.Sender)
	require.False(t, n.hooks[1].Recovering())
}

// Teams that are not runs of PEs pair every PE with a holder in another
// team; a team of more than half the PEs cannot be.
func TestTeamBuddiesKeepCopiesInAnotherTeam(t *testing.T) {
	for _, of := range [][]int32{{0, 1, 0, 1}, {0, 1, 2, 0, 1, 2, 0}, {0, 0, 1, 1, 2}, {0, 1, 1, 0, 2, 2}} {
		tm, err := TeamsOf(of)
		require.NoError(t, err)
		b, err := TeamBuddies(tm)
		require.NoError(t, err, "%v", of)
		seen := map[int32]bool{}
		for p := int32(0); int(p) < len(of); p++ {
			require.False(t, tm.Same(p, b.Of(p)), "teams %v: PE %d's copy in its own team", tm, p)
			require.Equal(t, p, b.Held(b.Of(p)))
			require.False(t, seen[b.Of(p)], "teams %v: PE %d holds two copies", tm, b.Of(p))
			seen[b.Of(p)] = true
		}
	}
	tm, err := TeamsOf([]int32{0, 0, 0, 1})
	require.NoError(t, err)
	_, err = TeamBuddies(tm)
	require.ErrorContains(t, err, "no team may hold more than half the PEs")
}

// A checkpoint that regroups sends each snapshot to its new holder and,
// once committed, holds the new pairs' copies alone; an aborted one
// forgets the new pairs.
func TestCheckpointerRegroups(t *testing.T) {
	old := NewBuddies(4, 1)
	tm, err := TeamsOf([]int32{0, 1, 0, 1})
	require.NoError(t, err)
	nb, err := TeamBuddies(tm)
	require.NoError(t, err)
	cks := make([]*Checkpointer, 4)
	for i := range cks {
		cks[i] = NewCheckpointer(int32(i), old, nil, &Snapshot{Owner: int32(i)})
		cks[i].Hold(&Snapshot{Owner: old.Held(int32(i))})
	}
	run := func(epoch uint64, regroup bool) {
		var pkts []Packet
		for i, c := range cks {
			if regroup {
				c.Regroup(nb)
			}
			for _, a := range c.Begin(epoch, &Snapshot{App: []byte{byte(i)}}) {
				pkts = append(pkts, a.Packet)
			}
		}
		for len(pkts) > 0 {
			p := pkts[0]
			pkts = pkts[1:]
			acts, err := cks[p.To].Receive(&p)
			require.NoError(t, err)
			for _, a := range acts {
				if a.Kind == ActSend {
					pkts = append(pkts, a.Packet)
				}
			}
		}
	}
	cks[0].Regroup(nb)
	cks[0].Abort()
	require.Equal(t, old, cks[0].Buddies(), "an aborted epoch keeps the pairs")
	run(1, true)
	for i, c := range cks {
		me := int32(i)
		require.Equal(t, nb, c.Buddies())
		require.NotNil(t, c.Committed(me))
		require.NotNil(t, c.Committed(nb.Held(me)), "PE %d holds PE %d's copy", i, nb.Held(me))
		if old.Held(me) != nb.Held(me) {
			require.Nil(t, c.Committed(old.Held(me)), "PE %d dropped the old pair's copy", i)
		}
	}
}

// A teammate's list naming PEs outside the job or outside the team is
// passed on without them (bytes from the network: never an index out of
// range).
func TestTeamRelayIgnoresStrangers(t *testing.T) {
	n := newTeamNet(t)
	env := pe.Envelope{Type: 1, Kind: pe.KindP2P, Payload: []byte{0}}
	require.NoError(t, n.hooks[1].Send(0, RoleP2P, 0, 0, false, &env))
	env.FT.Dets = []Det{{Sender: 2, Recver: 1, SSN: 1, RSN: 1}, {Sender: 2, Recver: 99, RSN: 1}, {Sender: 1, Recver: -3, RSN: 2}, {Sender: 3, Recver: 2, RSN: 1}, {Sender: 1, Recver: 0, RSN: 5}}
	got, err := n.hooks[0].Arrive(&env)
	require.NoError(t, err)
	require.Equal(t, Handle, got)
	out := n.send(0, 2)
	var owners []int32
	for _, d := range out.FT.Dets {
		owners = append(owners, d.Recver)
	}
	require.Equal(t, []int32{0, 1}, owners, "PE 0's own reception, then PE 1's")
}
