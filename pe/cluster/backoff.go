package cluster

import (
	"math/rand/v2"
	"time"
)

// backoff is the wait between a process's attempts to dial a peer: it
// doubles from 10 ms up to most, and each wait is drawn from its upper
// half, so that the processes a job dials one process with at once (a
// whole job may) do not dial again in step.
type backoff struct{ next, most time.Duration }

func newBackoff(most time.Duration) backoff { return backoff{next: 10 * time.Millisecond, most: most} }

// wait gives the next wait, no later than deadline.
func (b *backoff) wait(deadline time.Time) time.Duration {
	w := b.next
	b.next = min(2*b.next, b.most)
	return min(w/2+rand.N(w/2+1), max(time.Until(deadline), 0))
}
