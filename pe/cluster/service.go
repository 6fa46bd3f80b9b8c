package cluster

import (
	"errors"
	"fmt"

	"github.com/charmgo/charmgo/pe"
)

// Service is what the layer above offers the other processes besides
// its PEs (the pessimist protocol's event logger): messages of its own,
// sent over the data connections and handed over as they arrive.
type Service interface {
	// Receive: process from sent msg (SendService). Called by the reader
	// of from's connection, in the order sent, whatever the job's
	// generation and while PEs are being replaced: it must not block.
	// msg is the service's only during the call: the reader reads the
	// next frame over it.
	Receive(from int, msg []byte)
	// Lost: process r is gone (on every process that noticed); what
	// waits for it must not.
	Lost(r int)
	// Linked: this process's data connection to r, a lost process's
	// replacement, is up (on every process but r).
	Linked(r int)
}

// serviceType is the message type of a service message's entry: its
// payload is the message's bytes.
var serviceType = pe.RegisterType(pe.TypeInfo{
	Name: "cluster.service",
	Encode: func(v any) ([]byte, error) {
		b, ok := v.([]byte)
		if !ok {
			return nil, fmt.Errorf("a service message is bytes, not %T", v)
		}
		return b, nil
	},
	Decode: func(b []byte) (any, error) { return b, nil },
})

// ErrUnreachable is SendService's error when the process is lost or not
// connected: the message did not go.
var ErrUnreachable = errors.New("not connected")

// SetService makes s this process's service. Call it before Run.
func (j *Job) SetService(s Service) {
	j.mu.Lock()
	j.service = s
	j.mu.Unlock()
}

// SendService sends msg to process to's service, after what was queued
// for it. It fails with ErrUnreachable when the process is lost. Not from
// Service.Receive: a reply goes by ReplyService.
func (j *Job) SendService(to int, msg []byte) error { return j.sendService(to, msg, true) }

// ReplyService is SendService from a connection's reader (Service.Receive
// answering): the link's writer sends it, never the reader itself.
func (j *Job) ReplyService(to int, msg []byte) error { return j.sendService(to, msg, false) }

func (j *Job) sendService(to int, msg []byte, through bool) error {
	if to < 0 || to >= len(j.links) || to == j.cfg.Rank {
		return fmt.Errorf("a service message to process %d, not a peer of process %d", to, j.cfg.Rank)
	}
	l := j.links[to].Load()
	if l == nil {
		l = j.linkTo(to)
	}
	if l.down.Load() {
		return fmt.Errorf("process %d: %w", to, ErrUnreachable)
	}
	env := pe.Envelope{Type: serviceType, Kind: pe.KindSystem, Payload: msg}
	buf, err := pe.AppendFrameEntry(make([]byte, 0, 64+len(msg)), pe.ServiceDst, &env)
	if err != nil {
		return err
	}
	// never waiting for room: a reader answering a request must not
	// wait for the peer's reader, which may be answering it (service
	// messages are few and small)
	if err := l.enqueue(buf, 1, false, through); err != nil {
		return err
	}
	if l.down.Load() {
		return fmt.Errorf("process %d: %w", to, ErrUnreachable)
	}
	return nil
}

// serve hands a service entry from process from to the service.
func (j *Job) serve(from int, env *pe.Envelope) error {
	b, ok := env.Payload.([]byte)
	if env.Type != serviceType || !ok {
		return fmt.Errorf("an entry for the process itself of type %s, not a service message", pe.TypeName(env.Type))
	}
	j.mu.Lock()
	s := j.service
	j.mu.Unlock()
	if s == nil {
		return errors.New("a service message, and this process runs no service")
	}
	s.Receive(from, b)
	return nil
}
