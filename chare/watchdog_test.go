package chare

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/charmgo/charmgo/manager"
	"github.com/charmgo/charmgo/pe"
	"github.com/stretchr/testify/require"
)

// bouncer passes one message back and forth between PEs 0 and 1 for ever,
// as the runtime's own forwarding did when two PEs each took the other
// for an element's place (a recovery that carried out another balancing
// plan than the other PEs had). With entries set it runs an entry method
// at each bounce instead: a busy run, not a stuck one.
type bouncer struct{ entries bool }

func (b bouncer) Handle(p *pe.PE, env *pe.Envelope) {
	if d, ok := env.Payload.(*manager.DumpMsg); ok {
		d.Reply <- manager.PEDump{PE: p.ID(), Text: fmt.Sprintf("PE %d: passing a message round\n", p.ID())}
		return
	}
	if b.entries {
		p.Ran()
	}
	p.Send(1-p.ID(), &pe.Envelope{Kind: pe.KindP2P})
}

func runBouncer(t *testing.T, b bouncer, limit time.Duration) (*pe.Node, chan error) {
	return runBouncerOfJob(t, b, limit, nil)
}

func runBouncerOfJob(t *testing.T, b bouncer, limit time.Duration, waiting func() string) (*pe.Node, chan error) {
	node, err := pe.NewNode(pe.Config{NumPEs: 2}, func(*pe.PE) pe.Handler { return b })
	require.NoError(t, err)
	node.Inject(0, pe.Envelope{Kind: pe.KindP2P})
	node.Start()
	go watch(node, limit, waiting)
	done := make(chan error, 1)
	go func() { _, err := node.Wait(); done <- err }()
	return node, done
}

// A run whose PEs only pass the runtime's messages round — busy, never
// parked, but running no entry method — is a livelock: the watchdog ends
// it with a StallError that says so, as it ends a run whose PEs all park.
// (It used to count every message a PE handled as progress, and such a
// run kept two cores busy for as long as it was let.)
func TestWatchdogEndsALivelock(t *testing.T) {
	limit := 200 * time.Millisecond
	_, done := runBouncer(t, bouncer{}, limit)
	select {
	case err := <-done:
		var st *StallError
		require.True(t, errors.As(err, &st), "%v", err)
		require.Contains(t, err.Error(), "no progress for 200ms (watchdog)")
		require.Contains(t, err.Error(), "no entry method runs (a livelock)")
		require.Contains(t, st.Dump(), "PE 0: passing a message round")
		require.Contains(t, st.Dump(), "PE 1: passing a message round")
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog let a livelock run for 10s (limit 200ms)")
	}
}

// The same PEs running an entry method at every bounce make progress: the
// watchdog leaves them alone.
func TestWatchdogLeavesARunThatRunsEntries(t *testing.T) {
	limit := 100 * time.Millisecond
	node, done := runBouncer(t, bouncer{entries: true}, limit)
	select {
	case err := <-done:
		t.Fatalf("the run ended: %v", err)
	case <-time.After(8 * limit):
	}
	node.Stop(0)
	require.NoError(t, <-done)
}

// The job's other processes' entry methods count (their heartbeats set
// them): a process whose own PEs run nothing while the others work is
// not stuck.
func TestProgressCountsOtherProcesses(t *testing.T) {
	node, err := pe.NewNode(pe.Config{NumPEs: 1}, func(*pe.PE) pe.Handler { return bouncer{} })
	require.NoError(t, err)
	require.Zero(t, node.Progress())
	node.SetRemoteProgress(5)
	require.Equal(t, uint64(5), node.Progress())
	require.Zero(t, node.LocalProgress())
}

// In a job of several processes, what the process waits for from the
// others (a lost process whose replacement has not joined) is why its
// PEs wait: the watchdog's line names it, and the dump begins with it.
func TestWatchdogNamesTheLostProcessItWaitsFor(t *testing.T) {
	const why = "the replacement of process 2 was admitted; waiting for process 0's link to it"
	_, done := runBouncerOfJob(t, bouncer{}, 200*time.Millisecond, func() string { return why })
	select {
	case err := <-done:
		var st *StallError
		require.True(t, errors.As(err, &st), "%v", err)
		require.Equal(t, "no progress for 200ms (watchdog): "+why, err.Error())
		require.True(t, strings.HasPrefix(st.Dump(), "processes: "+why+"\n"), st.Dump())
		require.Contains(t, st.Dump(), "PE 0: passing a message round")
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not fire within 10s (limit 200ms)")
	}
}
