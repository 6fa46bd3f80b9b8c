package cluster

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/charmgo/charmgo/internal/atomicfile"

	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/zap"
)

// Rendezvous tells every process where the steward's control endpoint is
// (process 0's, from the start); the rest of the membership goes through
// it.
type Rendezvous interface {
	// Bind is the address process 0's control endpoint must listen on,
	// or "" for any port of Config.Host.
	Bind() string
	// Publish is called by process 0 with its control address.
	Publish(addr string) error
	// Lookup gives the others process 0's control address (the
	// steward's, once another took over: see Succession).
	Lookup(deadline time.Time) (string, error)
}

// Succession is a rendezvous that can point the processes that join
// later at another steward than process 0: process 0's replacement, and
// any other, find the job there once process 0 is lost. Only charmrun's
// does: a fixed address is process 0's own, and under srun or mpirun no
// replacement comes.
//
// It is also the job's membership in one order for every process: the
// steward's admissions and the steward's loss with its successor reach
// every process from it (Notices), so the processes agree on who steers
// next whatever the lost steward managed to tell each before it went.
type Succession interface {
	// Succeed tells the rendezvous that the steward's control endpoint
	// is now addr (the successor a Notice named, or process 0 once the
	// steering came back to it).
	Succeed(addr string) error
	// Admitted tells the rendezvous that the steward admitted m, the
	// replacement of a lost process, into the job: every process hears
	// of it (Notices), and it can take over in turn.
	Admitted(m Member) error
	// Listed tells the rendezvous that this process, a replacement, has
	// the job's list: it knows the others, and could tell a replacement
	// of them. The launcher replaces a lost process only while a process
	// so in the job is left (one joined at the start, or a replacement
	// listed), and without one no successor steers: a replacement the
	// steward admitted and was lost before its list came learns the job
	// only from such a process.
	Listed() error
	// Suspect tells the rendezvous that this process found the steward,
	// process rank, gone: the rendezvous takes it for gone too (a
	// steward cut off from the others but not from charmrun would
	// otherwise never be succeeded).
	Suspect(rank int) error
	// EndHung asks the launcher to end process rank, of incarnation
	// inc, which hangs on a host no other process of the job shares
	// (none there can kill it): it is then replaced as a lost process is.
	EndHung(rank, inc int) error
	// Moved gives the steward's address each time another takes over
	// after this process looked it up (a process joining while the
	// steward it found is lost asks the next).
	Moved() <-chan string
	// Notices gives what the rendezvous tells every process of the
	// job's membership, in its order.
	Notices() <-chan Notice
}

// A Notice is the rendezvous telling every process of a change in the
// job's membership: the steward admitted Joined, or (Joined nil) the
// steward, process Lost, is gone and process Next steers from now on
// (-1: no process of the job is left to).
type Notice struct {
	Joined *Member
	// Lost, LostInc: the steward gone, and its incarnation (a notice of
	// an incarnation this process does not know is of no process it
	// knows: a replacement hears of its own predecessor, say)
	Lost, LostInc, Next int
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
	Inc    int // this process's incarnation (its launcher's ReplacementEnv; 0 at the start)

	once      sync.Once
	conn      net.Conn
	r         *bufio.Reader
	gone      chan struct{}
	err       error
	watchOnce sync.Once
	wmu       sync.Mutex  // one line at a time on conn
	moved     chan string // the steward's new addresses (Moved)
	notices   chan Notice // (Notices)
}

func (c *Charmrun) Bind() string { return "" }

func (c *Charmrun) dial(deadline time.Time) error {
	c.once.Do(func() {
		c.gone = make(chan struct{})
		d := net.Dialer{Deadline: deadline}
		conn, err := d.Dial("tcp", c.Addr)
		if err == nil {
			err = dialHandshake(conn, c.Secret, uint32(c.Rank), CharmrunID)
			if err == nil {
				// (first: the successions charmrun tells of name it)
				_, err = fmt.Fprintf(conn, "I %d\n", c.Inc)
			}
			if err != nil {
				conn.Close()
			}
		}
		if err != nil {
			c.err = fmt.Errorf("charmrun at %s: %w", c.Addr, err)
			close(c.gone)
			return
		}
		c.conn, c.r = conn, bufio.NewReaderSize(conn, 512)
		c.moved = make(chan string, 1)
		c.notices = make(chan Notice, 2*maxReplacements+8) // (an admission and a succession each at most: never full)
	})
	return c.err
}

// Publish tells charmrun process 0's address.
func (c *Charmrun) Publish(addr string) error {
	if err := c.dial(time.Now().Add(DefaultHandshakeTimeout)); err != nil {
		return err
	}
	if err := c.line("P " + addr); err != nil {
		return err
	}
	c.watchOnce.Do(func() { go c.watch() })
	return nil
}

// Succeed tells charmrun that this process, process 0's successor, is the
// steward now, at addr: replacements look it up there.
func (c *Charmrun) Succeed(addr string) error {
	if err := c.dial(time.Now().Add(DefaultHandshakeTimeout)); err != nil {
		return err
	}
	return c.line("S " + addr)
}

// Admitted tells charmrun that m, the replacement of a lost process,
// joined the job.
func (c *Charmrun) Admitted(m Member) error {
	if err := c.dial(time.Now().Add(DefaultHandshakeTimeout)); err != nil {
		return err
	}
	enc, err := encodeMember(m)
	if err != nil {
		return err
	}
	return c.line("J " + enc)
}

// Listed tells charmrun that this replacement has the job's list.
func (c *Charmrun) Listed() error {
	if err := c.dial(time.Now().Add(DefaultHandshakeTimeout)); err != nil {
		return err
	}
	return c.line("H")
}

// EndHung asks charmrun to end process rank of incarnation inc, which
// hangs on a host no other process shares.
func (c *Charmrun) EndHung(rank, inc int) error {
	if err := c.dial(time.Now().Add(DefaultHandshakeTimeout)); err != nil {
		return err
	}
	return c.line(fmt.Sprintf("K %d %d", rank, inc))
}

// Suspect tells charmrun that the steward, process rank, is gone.
func (c *Charmrun) Suspect(rank int) error {
	if err := c.dial(time.Now().Add(DefaultHandshakeTimeout)); err != nil {
		return err
	}
	return c.line(fmt.Sprintf("X %d", rank))
}

func (c *Charmrun) line(l string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := fmt.Fprintf(c.conn, "%s\n", l)
	return err
}

// Lookup asks charmrun for process 0's address.
func (c *Charmrun) Lookup(deadline time.Time) (string, error) {
	if err := c.dial(deadline); err != nil {
		return "", err
	}
	c.conn.SetReadDeadline(deadline)
	if err := c.line("L"); err != nil {
		return "", err
	}
	for {
		// (notices pushed to every process may come before the answer)
		line, err := c.r.ReadString('\n')
		if err != nil {
			return "", fmt.Errorf("charmrun at %s did not give process 0's address: %w", c.Addr, err)
		}
		p, err := parsePush(line)
		if err != nil {
			return "", fmt.Errorf("charmrun at %s: %w", c.Addr, err)
		}
		if p.addr == "" {
			c.notices <- p.notice
			continue
		}
		c.conn.SetReadDeadline(time.Time{})
		c.watchOnce.Do(func() { go c.watch() })
		return p.addr, nil
	}
}

// watch reads what charmrun says after the first answer, a new
// steward's address ("A addr") or a notice to every process, until
// charmrun is gone. A line it cannot read ends the connection: what
// follows cannot be trusted to be in order.
func (c *Charmrun) watch() {
	defer close(c.gone)
	defer c.conn.Close()
	for {
		b, err := c.r.ReadSlice('\n')
		if err != nil {
			return
		}
		p, err := parsePush(string(b))
		if err != nil {
			fmt.Fprintf(os.Stderr, "charmgo: rendezvous: charmrun at %s: %v\n", c.Addr, err)
			return
		}
		if p.addr == "" {
			c.notices <- p.notice
			continue
		}
		select {
		case <-c.moved: // the older one is of a process gone
		default:
		}
		c.moved <- p.addr
	}
}

// push is one line charmrun sends a process (parsePush): a steward's
// address, or a notice.
type push struct {
	addr   string
	notice Notice
}

// parsePush reads one line charmrun sent a process: "A addr" (where
// the steward is), "R member" (the steward admitted a replacement,
// encodeMember), "D lost inc next" (the steward, process lost of
// incarnation inc, is gone; process next steers, -1: none).
func parsePush(line string) (push, error) {
	line = strings.TrimSuffix(line, "\n")
	kind, arg, _ := strings.Cut(line, " ")
	switch kind {
	case "A":
		if _, _, err := net.SplitHostPort(arg); err != nil || strings.ContainsAny(arg, " \t\n") {
			return push{}, fmt.Errorf("%q is no steward's address (host:port)", arg)
		}
		return push{addr: arg}, nil
	case "R":
		m, err := decodeMember(arg)
		if err != nil {
			return push{}, err
		}
		return push{notice: Notice{Joined: &m, Lost: -1, LostInc: -1, Next: -1}}, nil
	case "D":
		f := strings.Split(arg, " ")
		var n [3]int
		for i := range n {
			if len(f) != len(n) {
				break
			}
			v, err := strconv.Atoi(f[i])
			if err != nil {
				f = nil
				break
			}
			n[i] = v
		}
		if len(f) != len(n) || n[0] < 0 || n[1] < 0 || n[2] < -1 || n[0] == n[2] {
			return push{}, fmt.Errorf("%q names no lost steward and successor", line)
		}
		return push{notice: Notice{Lost: n[0], LostInc: n[1], Next: n[2]}}, nil
	}
	return push{}, fmt.Errorf("a line that is no answer: %q", line)
}

// encodeMember gives m as one word of a rendezvous line (the steward's
// admission, and charmrun's notice of it): msgpack, then base64.
func encodeMember(m Member) (string, error) {
	b, err := msgpack.Marshal(&m)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// decodeMember reads encodeMember's word, and checks the member is one a
// job may have.
func decodeMember(w string) (Member, error) {
	b, err := base64.RawURLEncoding.DecodeString(w)
	if err != nil {
		return Member{}, fmt.Errorf("an admitted process %q: %w", w, err)
	}
	var m Member
	if err := msgpack.Unmarshal(b, &m); err != nil {
		return Member{}, fmt.Errorf("an admitted process %q: %w", w, err)
	}
	if m.Rank < 0 || m.Inc < 1 || m.Control == "" || m.Data == "" {
		return Member{}, fmt.Errorf("an admitted process %q: rank %d, incarnation %d, control %q, data %q", w, m.Rank, m.Inc, m.Control, m.Data)
	}
	return m, nil
}

// Moved implements Succession.
func (c *Charmrun) Moved() <-chan string { return c.moved }

// Notices implements Succession.
func (c *Charmrun) Notices() <-chan Notice { return c.notices }

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
	gate      gate          // connections proving the secret (MaxHandshakes, MaxHandshakeQueue waiting)

	mu   sync.Mutex
	addr string // the steward's, once published (process 0's first)
	// by: the connection that published addr; once it ends, addr is of
	// a process gone, and lookups wait for its successor's
	by      net.Conn
	waiting []net.Conn // lookups before it was
	looked  []net.Conn // the others that looked it up, told of a successor's
	conns   map[int]net.Conn
	// left: per rank, closed once its connection's handler is done with
	// it (a replacement connecting meanwhile waits for it)
	left      map[int]chan struct{}
	joined    chan int    // ranks as they connect
	listed    chan int    // replacements' ranks as they have their list (Listed)
	suspected chan Ending // processes the launcher is to end (Suspected)
	// steward: the rank that steers (-1 before process 0 published);
	// member: the ranks whose connected process is in the job (it
	// connected at the start, or the steward admitted it): the steward's
	// successor is the lowest of them (succeed); knows: of them, those
	// that know the job's list (connected at the start, or a replacement
	// listed): a successor that does not gets it from one of them, and
	// with none left nobody steers
	steward int
	member  map[int]bool
	knows   map[int]bool
	seen    map[int]bool // ranks that connected once: a later connection is a replacement's
	inc     map[int]int  // the incarnation of each rank's process connected (its "I" line)
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
	s := &RendezvousServer{ln: ln, secret: secret, procs: procs, log: log, handshake: handshake, gate: newGate(MaxHandshakes, MaxHandshakeQueue),
		conns: map[int]net.Conn{}, left: map[int]chan struct{}{}, joined: make(chan int, 2*procs), listed: make(chan int, 2*procs), suspected: make(chan Ending, 2*procs),
		steward: -1, member: map[int]bool{}, knows: map[int]bool{}, seen: map[int]bool{}, inc: map[int]int{}}
	go s.serve()
	return s, nil
}

// Addr is where processes reach the rendezvous.
func (s *RendezvousServer) Addr() string { return s.ln.Addr().String() }

// Joined gives each rank once its process has connected.
func (s *RendezvousServer) Joined() <-chan int { return s.joined }

// Listed gives the rank of each replacement once it has the job's list
// (the steward admitted it, and it knows the others).
func (s *RendezvousServer) Listed() <-chan int { return s.listed }

// An Ending is a process the launcher is to end, if that incarnation
// still runs, so that it is replaced as a lost process is: a steward
// another process found gone while its connection here was still up (cut
// off from the others; or dead, and charmrun had not yet read the end of
// its connection: the rendezvous named its successor), or (Hung) a
// process found hung on a host no other process of the job shares. Its
// connection here is closed (it would end itself then, not as a lost
// process).
type Ending struct {
	Rank, Inc int
	Hung      bool
}

// Suspected gives the processes the launcher is to end.
func (s *RendezvousServer) Suspected() <-chan Ending { return s.suspected }

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
		if !s.gate.reserve() {
			s.log.Debug("refused a rendezvous connection: too many proving the secret at once", zap.String("from", c.RemoteAddr().String()))
			c.Close()
			continue
		}
		go s.handle(c)
	}
}

func (s *RendezvousServer) handle(c net.Conn) {
	deadline := time.Now().Add(s.handshake)
	if !s.gate.enter(deadline) {
		s.log.Debug("dropped a rendezvous connection: its turn to prove the secret did not come within the handshake timeout", zap.String("from", c.RemoteAddr().String()))
		c.Close()
		return
	}
	id, err := acceptHandshake(c, s.secret, CharmrunID, time.Until(deadline), func(id uint32) error {
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
		// A replacement may come before the lost process's connection,
		// closed by its end, was read to its end here (found by
		// TestTheRendezvousNamesOneSuccessor under load): it waits for
		// that, within the handshake timeout, and is refused only if
		// the other connection stays (a second process for one rank).
		left := s.left[rank]
		s.mu.Unlock()
		select {
		case <-left:
		case <-time.After(time.Until(deadline)):
		}
		s.mu.Lock()
		if _, dup := s.conns[rank]; dup {
			s.mu.Unlock()
			s.log.Warn("refused a second rendezvous connection for one rank", zap.Int("rank", rank))
			c.Close()
			return
		}
	}
	s.conns[rank] = c
	left := make(chan struct{})
	s.left[rank] = left
	s.inc[rank] = 0 // (until it says)
	if !s.seen[rank] {
		s.seen[rank], s.member[rank], s.knows[rank] = true, true, true
	}
	s.mu.Unlock()
	select {
	case s.joined <- rank:
	default: // a replacement's: charmrun counts first joins only
	}
	defer func() {
		// The process holds its connection while it runs: once it is
		// gone, its replacement may connect.
		c.Close()
		s.mu.Lock()
		if s.conns[rank] == c {
			close(left)
			delete(s.left, rank)
			delete(s.conns, rank)
			delete(s.member, rank)
			delete(s.knows, rank)
			if rank == s.steward {
				s.succeed(rank)
			}
		}
		if s.by == c {
			s.addr, s.by = "", nil
		}
		s.waiting = slices.DeleteFunc(s.waiting, func(w net.Conn) bool { return w == c })
		s.looked = slices.DeleteFunc(s.looked, func(w net.Conn) bool { return w == c })
		s.mu.Unlock()
	}()
	r := bufio.NewReaderSize(c, 512) // a line longer than that is no request: the connection ends
	c.SetReadDeadline(time.Now().Add(s.handshake))
	for first := true; ; first = false {
		b, err := r.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				s.log.Warn("rendezvous: a request longer than 512 bytes", zap.Int("rank", rank))
			}
			return
		}
		line := string(b)
		if first {
			// (later lines come when they come: a successor's, maybe never)
			c.SetReadDeadline(time.Time{})
		}
		s.request(rank, c, strings.TrimSpace(line))
	}
}

// succeed: the steward, process lost, is gone (s.mu held). The lowest
// rank in the job steers from now on, and every process is told so, in
// the order of everything else it is told: the processes agree on it
// whatever the lost steward told each of them before it went (an
// admission it was telling the others of when it was lost, say).
// Lookups wait until the successor says where it listens (Succeed). A
// successor without the job's list has it from the others that know it;
// if none is left (the steward admitted replacements and was lost before
// their lists came), nobody can steer: next is -1.
func (s *RendezvousServer) succeed(lost int) {
	inc := s.inc[lost]
	next := -1
	for r := range s.procs {
		if s.member[r] && s.conns[r] != nil {
			next = r
			break
		}
	}
	known := false
	for r := range s.knows {
		known = known || s.conns[r] != nil
	}
	if !known {
		next = -1
	}
	s.steward = next
	s.log.Info("rendezvous: the steward is gone", zap.Int("lost", lost), zap.Int("next", next))
	s.pushAll(fmt.Sprintf("D %d %d %d\n", lost, inc, next), -1)
}

// pushAll sends line to every process connected but process except
// (s.mu held).
func (s *RendezvousServer) pushAll(line string, except int) {
	for r, w := range s.conns {
		if r != except {
			w.SetWriteDeadline(time.Now().Add(s.handshake))
			fmt.Fprint(w, line) // (a process that does not read is gone, or soon will be)
			w.SetWriteDeadline(time.Time{})
		}
	}
}

// rendezvousRequest is one line a process sends charmrun's rendezvous.
type rendezvousRequest struct {
	kind   byte   // 'I', 'P', 'S', 'L', 'J', 'H', 'X' or 'K' (see parseRequest)
	addr   string // P, S: a control address, host:port
	rank   int    // X: the steward found gone; K: the hung process; I: the incarnation
	inc    int    // K: the hung process's incarnation
	member Member // J: the replacement admitted
	word   string // J: the member as sent (encodeMember)
}

// parseRequest reads one line of the rendezvous from process from of a
// job of procs: "I inc" (first: the process's incarnation), "P addr"
// (process 0, at the start: its control address),
// "S addr" (the successor of a lost steward, or process 0 once the
// steering came back: its own), "L" (where is the steward?), "J member"
// (the steward admitted a replacement: encodeMember), "H" (a replacement
// has the job's list: Listed), "X rank" (the
// steward, process rank, is gone: Suspect), "K rank inc" (process rank
// of incarnation inc hangs where none of the others can kill it:
// EndHung).
func parseRequest(line string, from, procs int) (rendezvousRequest, error) {
	kind, arg, _ := strings.Cut(line, " ")
	switch kind {
	case "L", "H":
		if arg != "" {
			return rendezvousRequest{}, fmt.Errorf("%q takes nothing: %q", kind, line)
		}
		return rendezvousRequest{kind: kind[0]}, nil
	case "P", "S":
		if kind == "P" && from != 0 {
			return rendezvousRequest{}, fmt.Errorf("process %d published an address: only process 0 does, at the start", from)
		}
		if _, _, err := net.SplitHostPort(arg); err != nil || strings.ContainsAny(arg, " \t\n") {
			return rendezvousRequest{}, fmt.Errorf("%q is no control address (host:port)", arg)
		}
		return rendezvousRequest{kind: kind[0], addr: arg}, nil
	case "J":
		m, err := decodeMember(arg)
		if err != nil {
			return rendezvousRequest{}, err
		}
		if m.Rank >= procs {
			return rendezvousRequest{}, fmt.Errorf("an admission of process %d: the job has processes 0..%d", m.Rank, procs-1)
		}
		return rendezvousRequest{kind: 'J', rank: m.Rank, member: m, word: arg}, nil
	case "I":
		n, err := strconv.Atoi(arg)
		if err != nil || n < 0 {
			return rendezvousRequest{}, fmt.Errorf("an incarnation of %q", arg)
		}
		return rendezvousRequest{kind: 'I', rank: n}, nil
	case "K":
		a, b, _ := strings.Cut(arg, " ")
		r, err1 := strconv.Atoi(a)
		inc, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil || r < 0 || r >= procs || inc < 0 {
			return rendezvousRequest{}, fmt.Errorf("a hung process %q: want its rank (0..%d) and incarnation", arg, procs-1)
		}
		return rendezvousRequest{kind: 'K', rank: r, inc: inc}, nil
	case "X":
		r, err := strconv.Atoi(arg)
		if err != nil || r < 0 || r >= procs {
			return rendezvousRequest{}, fmt.Errorf("a lost steward %q: the job has processes 0..%d", arg, procs-1)
		}
		return rendezvousRequest{kind: 'X', rank: r}, nil
	}
	return rendezvousRequest{}, fmt.Errorf("unknown request %q", line)
}

// request answers one line of the rendezvous (parseRequest). A lookup
// before any address, or while the steward is lost and no successor said
// it took over, waits; a new steward's address goes to every process
// that looked up the last one (a process still joining asks it instead).
func (s *RendezvousServer) request(rank int, c net.Conn, line string) {
	req, err := parseRequest(line, rank, s.procs)
	if err != nil {
		s.log.Warn("rendezvous: a request refused", zap.Int("rank", rank), zap.Error(err))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch req.kind {
	case 'I':
		if s.conns[rank] == c {
			s.inc[rank] = req.rank
		}
	case 'P', 'S':
		s.addr, s.by, s.steward = req.addr, c, rank
		for _, w := range s.looked {
			if w != c {
				fmt.Fprintf(w, "A %s\n", s.addr)
			}
		}
		for _, w := range s.waiting {
			fmt.Fprintf(w, "A %s\n", s.addr)
		}
		s.looked = append(s.looked, s.waiting...)
		s.waiting = nil
	case 'L':
		if s.addr == "" {
			s.waiting = append(s.waiting, c)
			return
		}
		fmt.Fprintf(c, "A %s\n", s.addr)
		s.looked = append(s.looked, c)
	case 'J':
		if s.conns[req.rank] != nil {
			s.member[req.rank] = true
		}
		s.pushAll("R "+req.word+"\n", rank)
	case 'H':
		if s.conns[rank] == c && !s.knows[rank] {
			// (its admission may come after: another connection)
			s.member[rank], s.knows[rank] = true, true
			select {
			case s.listed <- rank:
			default: // (charmrun is ending: nobody reads)
			}
		}
	case 'X':
		if w := s.conns[req.rank]; w != nil && req.rank == s.steward && req.rank != rank {
			// (its handler then finds the connection closed: succeed)
			s.log.Info("rendezvous: a process found the steward gone", zap.Int("steward", req.rank), zap.Int("from", rank))
			w.Close()
			select {
			case s.suspected <- Ending{Rank: req.rank, Inc: s.inc[req.rank]}:
			default: // (charmrun is ending: nobody reads)
			}
		}
	case 'K':
		if w := s.conns[req.rank]; w != nil && s.inc[req.rank] == req.inc && req.rank != rank {
			// (a steward's handler then finds the connection closed:
			// succeed)
			s.log.Info("rendezvous: a process found another hung", zap.Int("hung", req.rank), zap.Int("from", rank))
			w.Close()
			select {
			case s.suspected <- Ending{Rank: req.rank, Inc: req.inc, Hung: true}:
			default: // (charmrun is ending: nobody reads)
			}
		}
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
