package cluster

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/charmgo/charmgo/pe"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// watchPeers asks the control actor to watch these peers' control
// actors, and no others.
type watchPeers struct{ pids []*actor.PID }

// startActors starts this process's actor system, its remote (mutual TLS
// from the job's secret) on addr, and the control actor.
func (j *Job) startActors(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("control address %q: %w", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("control address %q: port: %w", addr, err)
	}
	tlsCfg, err := j.cfg.Secret.TLS()
	if err != nil {
		return err
	}
	// protoactor-go logs through slog: its records go to the zap logger
	// the caller gave for it.
	slogger := slog.New(zapslog.NewHandler(j.cfg.ActorLog.Named("protoactor").Core()))
	j.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slogger }))
	creds := loggedCreds{TransportCredentials: credentials.NewTLS(tlsCfg), log: j.log, gate: j.ctlGate, timeout: j.cfg.HandshakeTimeout}
	// grpc's own bound on a connection's set-up is 120 s by default: a
	// silent client held a connection for as long
	opts := []remote.ConfigOption{remote.WithServerOptions(grpc.Creds(creds), grpc.ConnectionTimeout(j.cfg.HandshakeTimeout)),
		// protoactor-go's writer to each peer starts its mailbox's ring
		// at 1,000,000 slots (16 MB, most of a process's heap with one
		// peer, and 16 MB more for each other); the ring doubles when
		// full, and the control plane carries a few messages at a time
		remote.WithEndpointWriterQueueSize(endpointQueueSlots)}
	cfg := remote.Configure(host, p, append(opts,
		remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg))))...)
	j.rem = remote.NewRemote(j.sys, cfg)
	if err := startRemote(j.rem); err != nil {
		return fmt.Errorf("control plane: listen on %s: %w", addr, err)
	}
	props := actor.PropsFromFunc(j.receive)
	if _, err := j.sys.Root.SpawnNamed(props, actorName); err != nil {
		return fmt.Errorf("control actor: %w", err)
	}
	return nil
}

// remoteStart serialises protoactor-go's Remote.Start, which sets grpc's
// process-wide logger: two jobs started at once in one process (tests)
// would race on it. It guards a third party's global, not state of ours.
var remoteStart sync.Mutex

// startRemote starts r, which panics when it cannot listen.
func startRemote(r *remote.Remote) (err error) {
	remoteStart.Lock()
	defer remoteStart.Unlock()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	r.Start()
	return nil
}

// receive is the control actor: it turns control messages and the
// termination of watched peers into the job's control events.
func (j *Job) receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *wrapperspb.BytesValue:
		var c control
		if err := pe.UnmarshalMsgpack(m.Value, &c); err != nil || c.From < 0 || c.From >= j.cfg.Procs {
			j.log.Warn("dropped a control message that does not decode", zap.Error(err), zap.Int("from", c.From))
			return
		}
		j.counts.received.Add(1)
		if c.Kind == ctlBeat {
			j.counts.beatsReceived.Add(1)
		}
		j.ctl <- c
	case watchPeers:
		want := map[string]*actor.PID{}
		for _, pid := range m.pids {
			want[pid.String()] = pid
		}
		for k, pid := range j.watching {
			if want[k] == nil {
				ctx.Unwatch(pid)
			}
		}
		for k, pid := range want {
			if j.watching[k] == nil {
				ctx.Watch(pid)
			}
		}
		j.watching = want
	case *actor.Terminated:
		j.mu.Lock()
		pids := slices.Clone(j.pids)
		incs := make([]int, len(j.members))
		for r, mm := range j.members {
			incs[r] = mm.Inc
		}
		j.mu.Unlock()
		for r, pid := range pids {
			// a replaced process's old address matches no one any more
			if r != j.cfg.Rank && pid != nil && pid.Address == m.Who.Address {
				j.ctl <- control{Kind: ctlLost, From: r, Inc: incs[r]}
			}
		}
	}
}

// endpointQueueSlots is the ring a control-plane writer to a peer starts
// with (it grows as it fills).
const endpointQueueSlots = 1024

// loggedCreds logs every refused control-plane connection: a client that
// cannot show the job's certificate (no secret, another job's) fails the
// TLS handshake and never reaches protoactor-go. As on the data plane, a
// handshake has timeout to finish, counted from its arrival, and at most
// MaxHandshakes go on at once (MaxHandshakeQueue more wait for a turn,
// and one more is closed as it comes).
type loggedCreds struct {
	credentials.TransportCredentials
	log     *zap.Logger
	gate    gate
	timeout time.Duration
}

// errBusy refuses a control connection while MaxHandshakes others try
// and MaxHandshakeQueue more wait; errNoTurn drops one whose turn did not
// come within the handshake timeout.
var (
	errBusy   = errors.New("too many connections proving the job's secret at once")
	errNoTurn = errors.New("its turn to prove the job's secret did not come within the handshake timeout")
)

func (c loggedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	// (grpc calls this on the connection's own goroutine: waiting here
	// for a turn holds nothing else up)
	deadline := time.Now().Add(c.timeout)
	if !c.gate.reserve() {
		c.log.Debug("refused a control connection", zap.String("from", conn.RemoteAddr().String()), zap.Error(errBusy))
		conn.Close()
		return nil, nil, errBusy
	}
	if !c.gate.enter(deadline) {
		c.log.Debug("dropped a control connection", zap.String("from", conn.RemoteAddr().String()), zap.Error(errNoTurn))
		conn.Close()
		return nil, nil, errNoTurn
	}
	conn.SetDeadline(deadline)
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	conn.SetDeadline(time.Time{})
	c.gate.leave()
	switch {
	case err == nil:
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed):
		// A peer that went away mid-handshake (a process of the job ending)
		// proved nothing, but is no intruder either.
		c.log.Debug("a control connection ended during its handshake", zap.String("from", conn.RemoteAddr().String()), zap.Error(err))
	default:
		c.log.Warn("refused a control connection", zap.String("from", conn.RemoteAddr().String()), zap.Error(err))
	}
	return out, info, err
}

func (c loggedCreds) Clone() credentials.TransportCredentials {
	return loggedCreds{TransportCredentials: c.TransportCredentials.Clone(), log: c.log, gate: c.gate, timeout: c.timeout}
}
