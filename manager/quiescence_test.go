package manager

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The root's counting, driven without a PE: a detection is released only
// after two waves in a row found every message processed and nothing new;
// a checkpoint's goes alone, the end of the run's only with nothing else;
// a wave a failed PE never answers is abandoned.
func TestQuiescenceCounting(t *testing.T) {
	type reply struct{ sent, proc uint64 }
	wave := func(q *qdRoot, n int, rs ...reply) ([]qdWaiter, qdNext) {
		w := q.startWave()
		var rel []qdWaiter
		next := qdWait
		for i, r := range rs {
			rel, next = q.reply(w, r.sent, r.proc, 1, n, false)
			if i < len(rs)-1 {
				require.Equal(t, qdWait, next, "reply %d of %d", i+1, n)
			}
		}
		return rel, next
	}
	var q qdRoot
	require.True(t, q.request(qdWaiter{pe: 1, tag: 7}), "the first request starts counting")
	require.False(t, q.request(qdWaiter{pe: 0, tag: EndQDTag}), "a second one joins it")
	require.True(t, q.idle())

	_, next := wave(&q, 2, reply{5, 4}, reply{3, 3})
	require.Equal(t, qdArm, next, "a message in flight: busy")
	_, next = wave(&q, 2, reply{5, 5}, reply{3, 3})
	require.Equal(t, qdWaveAgain, next, "quiet once: confirm")
	rel, next := wave(&q, 2, reply{5, 5}, reply{3, 3})
	require.Equal(t, []qdWaiter{{1, 7}}, rel, "the program's detection goes first")
	require.Equal(t, qdArm, next, "the end of the run waits for a moment that releases nothing else")
	_, next = wave(&q, 2, reply{6, 6}, reply{3, 3})
	require.Equal(t, qdWaveAgain, next, "its callback's message counted: quiet again, confirm")
	rel, next = wave(&q, 2, reply{6, 6}, reply{3, 3})
	require.Equal(t, []qdWaiter{{0, EndQDTag}}, rel)
	require.Equal(t, qdStop, next)
	require.False(t, q.idle(), "nothing waits")

	// a checkpoint goes alone, before the end of the run
	q = qdRoot{}
	q.request(qdWaiter{pe: 0, tag: EndQDTag})
	q.request(qdWaiter{pe: 0, tag: ckptQDTag | 3})
	wave(&q, 1, reply{1, 1})
	rel, next = wave(&q, 1, reply{1, 1})
	require.Equal(t, []qdWaiter{{0, ckptQDTag | 3}}, rel)
	require.Equal(t, qdArm, next)

	// a PE fails with a wave in flight: its reply never comes, the wave is
	// abandoned, and a late reply of it is ignored
	q = qdRoot{}
	q.request(qdWaiter{pe: 0, tag: 1})
	w := q.startWave()
	_, next = q.reply(w, 1, 1, 1, 2, false)
	require.Equal(t, qdWait, next)
	require.True(t, q.peerFailed())
	_, next = q.reply(w, 1, 1, 1, 2, false)
	require.Equal(t, qdWait, next, "the abandoned wave's reply")
	require.False(t, q.peerFailed(), "no wave in flight")
	require.True(t, q.idle())

	// while a checkpoint is being taken no moment is quiet, however the
	// counts look: its messages are not counted
	q = qdRoot{}
	q.request(qdWaiter{pe: 0, tag: EndQDTag})
	for i := 0; i < 3; i++ {
		w = q.startWave()
		rel, next = q.reply(w, 2, 2, 1, 1, true)
		require.Empty(t, rel)
		require.Equal(t, qdArm, next)
	}
	w = q.startWave()
	_, next = q.reply(w, 2, 2, 1, 1, false)
	require.Equal(t, qdWaveAgain, next, "quiet once the checkpoint is over: confirmed by a second wave")
	w = q.startWave()
	rel, _ = q.reply(w, 2, 2, 1, 1, false)
	require.Equal(t, []qdWaiter{{0, EndQDTag}}, rel)
}

// A PE's part of a wave over the tree: it answers once it is idle and
// every child answered, with its subtree's sums and PE count; answers of
// another wave, or past the children it has, are dropped, and a new probe
// drops an abandoned wave's part.
func TestQDGatherSumsASubtree(t *testing.T) {
	var g qdGather
	g.probe(3, 2)
	require.False(t, g.child(2, 5, 9, 9), "an old wave's answer")
	require.False(t, g.self(1, 2))
	require.False(t, g.self(100, 100), "its own counts go in once")
	require.False(t, g.child(3, 4, 10, 20))
	require.True(t, g.child(3, 3, 5, 6), "the last child: complete")
	require.Equal(t, qdGather{wave: 3, own: true, pes: 8, sent: 16, proc: 28}, g)
	require.False(t, g.child(3, 1, 1, 1), "after the answer went")
	require.False(t, g.self(1, 1))

	g.probe(4, 0)
	require.True(t, g.self(7, 7), "a leaf answers as it goes idle")
	g.probe(5, 1)
	require.False(t, g.child(5, 1, 1, 1))
	g.probe(6, 1) // wave 5 abandoned
	require.False(t, g.self(2, 2))
	require.True(t, g.child(6, 1, 1, 1))
	require.Equal(t, 2, g.pes)
}
