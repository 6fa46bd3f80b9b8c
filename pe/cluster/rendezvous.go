package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/charmgo/charmgo/internal/atomicfile"

	"go.uber.org/zap"
)

// Rendezvous tells every process where process 0's control endpoint is;
// the rest of the membership goes through it.
type Rendezvous interface {
	// Bind is the address process 0's control endpoint must listen on,
	// or "" for any port of Config.Host.
	Bind() string
	// Publish is called by process 0 with its control address.
	Publish(addr string) error
	// Lookup gives the others process 0's control address.
	Lookup(deadline time.Time) (string, error)
}

// FixedAddress is a rendezvous at an address every process is given
// (--rendezvous HOST:PORT): process 0 listens there.
type FixedAddress string

func (a FixedAddress) Bind() string                     { return string(a) }
func (a FixedAddress) Publish(string) error             { return nil }
func (a FixedAddress) Lookup(time.Time) (string, error) { return string(a), nil }

// Directory is a rendezvous through a directory every host sees (a shared
// file system, --rendezvous-dir DIR): process 0 writes its address to a
// file named after the job, the others read it.
type Directory struct {
	Dir string
	Job string // the launcher's job id: processes of one job meet
}

func (d Directory) path() string { return filepath.Join(d.Dir, "charmgo-"+d.Job+".addr") }

func (d Directory) Bind() string { return "" }

func (d Directory) Publish(addr string) error {
	return atomicfile.WriteBytes(d.path(), 0o600, false, []byte(addr+"\n")) // whole or not at all
}

func (d Directory) Lookup(deadline time.Time) (string, error) {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		b, err := os.ReadFile(d.path())
		if err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b)), nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s: process 0 did not write its address in time", d.path())
		}
		time.Sleep(wait) // a file system offers nothing to wait on
	}
}

// Charmrun is the rendezvous charmrun serves (RendezvousServer): every
// process connects to it, proves the job's secret, and keeps the
// connection while it runs. Process 0 tells its address, the others ask
// for it. If the connection ends, charmrun is gone, and so must the job
// be (Gone): no process outlives its launcher.
type Charmrun struct {
	Addr   string
	Secret Secret
	Rank   int

	once sync.Once
	conn net.Conn
	r    *bufio.Reader
	gone chan struct{}
	err  error
}

func (c *Charmrun) Bind() string { return "" }

func (c *Charmrun) dial(deadline time.Time) error {
	c.once.Do(func() {
		c.gone = make(chan struct{})
		d := net.Dialer{Deadline: deadline}
		conn, err := d.Dial("tcp", c.Addr)
		if err == nil {
			err = dialHandshake(conn, c.Secret, uint32(c.Rank), CharmrunID)
			if err != nil {
				conn.Close()
			}
		}
		if err != nil {
			c.err = fmt.Errorf("charmrun at %s: %w", c.Addr, err)
			close(c.gone)
			return
		}
		c.conn, c.r = conn, bufio.NewReader(conn)
	})
	return c.err
}

// Publish tells charmrun process 0's address.
func (c *Charmrun) Publish(addr string) error {
	if err := c.dial(time.Now().Add(DefaultHandshakeTimeout)); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(c.conn, "P %s\n", addr); err != nil {
		return err
	}
	go c.watch()
	return nil
}

// Lookup asks charmrun for process 0's address.
func (c *Charmrun) Lookup(deadline time.Time) (string, error) {
	if err := c.dial(deadline); err != nil {
		return "", err
	}
	c.conn.SetReadDeadline(deadline)
	if _, err := fmt.Fprintf(c.conn, "L\n"); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("charmrun at %s did not give process 0's address: %w", c.Addr, err)
	}
	c.conn.SetReadDeadline(time.Time{})
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "A ")
	if !ok {
		return "", fmt.Errorf("charmrun at %s answered %q", c.Addr, line)
	}
	go c.watch()
	return addr, nil
}

func (c *Charmrun) watch() {
	var b [1]byte
	c.conn.Read(b[:]) // nothing more comes: it returns when charmrun is gone
	close(c.gone)
}

// Gone is closed once charmrun's connection ended.
func (c *Charmrun) Gone() <-chan struct{} { return c.gone }

// Close drops the connection (at the end of the job).
func (c *Charmrun) Close() {
	if c.conn != nil {
		c.conn.Close()
	}
}

// RendezvousServer is charmrun's side of the Charmrun rendezvous.
type RendezvousServer struct {
	ln        net.Listener
	secret    Secret
	procs     int
	log       *zap.Logger
	handshake time.Duration // DefaultHandshakeTimeout unless a test says
	gate      gate          // connections proving the secret (MaxHandshakes)

	mu      sync.Mutex
	addr    string     // process 0's, once published
	waiting []net.Conn // lookups before it was
	conns   map[int]net.Conn
	joined  chan int // ranks as they connect
}

// ServeRendezvous listens on host (port 0: any free port) for the job's
// procs processes; handshake bounds each connection's proof of the secret
// (0: DefaultHandshakeTimeout).
func ServeRendezvous(host string, secret Secret, procs int, log *zap.Logger, handshake time.Duration) (*RendezvousServer, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ConcreteHost(host), "0"))
	if err != nil {
		return nil, fmt.Errorf("rendezvous: listen on %s: %w", host, err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	if handshake <= 0 {
		handshake = DefaultHandshakeTimeout
	}
	s := &RendezvousServer{ln: ln, secret: secret, procs: procs, log: log, handshake: handshake, gate: newGate(MaxHandshakes),
		conns: map[int]net.Conn{}, joined: make(chan int, 2*procs)}
	go s.serve()
	return s, nil
}

// Addr is where processes reach the rendezvous.
func (s *RendezvousServer) Addr() string { return s.ln.Addr().String() }

// Joined gives each rank once its process has connected.
func (s *RendezvousServer) Joined() <-chan int { return s.joined }

// Close ends the rendezvous and every process's connection to it, which
// ends the processes still running.
func (s *RendezvousServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	for _, c := range s.waiting {
		c.Close()
	}
}

func (s *RendezvousServer) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		if !s.gate.enter() {
			s.log.Debug("refused a rendezvous connection: too many proving the secret at once", zap.String("from", c.RemoteAddr().String()))
			c.Close()
			continue
		}
		go s.handle(c)
	}
}

func (s *RendezvousServer) handle(c net.Conn) {
	id, err := acceptHandshake(c, s.secret, CharmrunID, s.handshake, func(id uint32) error {
		if int(id) >= s.procs {
			return fmt.Errorf("rank %d: the job has %d processes", int32(id), s.procs)
		}
		return nil
	})
	s.gate.leave()
	if err != nil {
		s.log.Warn("refused a rendezvous connection", zap.String("from", c.RemoteAddr().String()), zap.Error(err))
		c.Close()
		return
	}
	rank := int(id)
	s.mu.Lock()
	if _, dup := s.conns[rank]; dup {
		s.mu.Unlock()
		s.log.Warn("refused a second rendezvous connection for one rank", zap.Int("rank", rank))
		c.Close()
		return
	}
	s.conns[rank] = c
	s.mu.Unlock()
	select {
	case s.joined <- rank:
	default: // a replacement's: charmrun counts first joins only
	}
	defer func() {
		// The process holds its connection while it runs: once it is
		// gone, its replacement may connect.
		io.Copy(io.Discard, c)
		c.Close()
		s.mu.Lock()
		if s.conns[rank] == c {
			delete(s.conns, rank)
		}
		s.mu.Unlock()
	}()
	c.SetReadDeadline(time.Now().Add(s.handshake))
	line, err := bufio.NewReader(c).ReadString('\n')
	c.SetReadDeadline(time.Time{})
	if err != nil {
		return
	}
	line = strings.TrimSpace(line)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case rank == 0 && strings.HasPrefix(line, "P "):
		s.addr = strings.TrimPrefix(line, "P ")
		for _, w := range s.waiting {
			fmt.Fprintf(w, "A %s\n", s.addr)
		}
		s.waiting = nil
	case line == "L" && s.addr != "":
		fmt.Fprintf(c, "A %s\n", s.addr)
	case line == "L":
		s.waiting = append(s.waiting, c)
	default:
		s.log.Warn("rendezvous: unexpected request", zap.Int("rank", rank), zap.String("line", line))
	}
}

// ConcreteHost is host, unless it means every interface (0.0.0.0, ::):
// then this host's own address, which others can dial: the first
// non-loopback address its name resolves to, else of its interfaces.
func ConcreteHost(host string) string {
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return host
	}
	return hostAddress()
}

func hostAddress() string {
	if name, err := os.Hostname(); err == nil {
		if ips, err := net.LookupIP(name); err == nil {
			for _, ip := range ips {
				if !ip.IsLoopback() && ip.To4() != nil {
					return ip.String()
				}
			}
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
