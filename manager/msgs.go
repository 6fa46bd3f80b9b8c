package manager

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/charmgo/charmgo/ftlayer"
	"github.com/charmgo/charmgo/loadbalance"
	"github.com/charmgo/charmgo/pe"
	"github.com/vmihailenco/msgpack/v5"
)

// Lazy carries a value whose Go type only the receiver knows (constructor
// arguments, future values). In process V travels as is; on the wire it is
// msgpack bytes in Raw, decoded by the receiver into its own type.
type Lazy struct {
	V   any
	Raw []byte
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (l Lazy) EncodeMsgpack(enc *msgpack.Encoder) error {
	if l.Raw != nil {
		return enc.EncodeBytes(l.Raw)
	}
	b, err := msgpack.Marshal(l.V)
	if err != nil {
		return err
	}
	return enc.EncodeBytes(b)
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (l *Lazy) DecodeMsgpack(dec *msgpack.Decoder) error {
	b, err := dec.DecodeBytes()
	if err != nil {
		return err
	}
	l.V, l.Raw = nil, b
	return nil
}

// LazyAs returns the value of l as a T.
func LazyAs[T any](l Lazy) (T, error) {
	var t T
	if l.Raw == nil {
		if l.V == nil {
			return t, nil
		}
		v, ok := l.V.(T)
		if !ok {
			return t, fmt.Errorf("value is %T, want %T", l.V, t)
		}
		return v, nil
	}
	err := pe.UnmarshalMsgpack(l.Raw, &t)
	return t, err
}

// MsgpackCodec encodes values of type T with msgpack; a []float64 with
// a loop of its own, to msgpack's bytes (floats.go).
func MsgpackCodec[T any]() Codec {
	if _, floats := any(*new(T)).([]float64); floats {
		return Codec{
			Encode: func(v any) ([]byte, error) { return appendFloat64s(nil, v.([]float64)), nil },
			Append: func(dst []byte, v any) ([]byte, error) { return appendFloat64s(dst, v.([]float64)), nil },
			Decode: func(b []byte) (any, error) {
				if v, ok := decodeFloat64s(b); ok {
					return v, nil
				}
				var t []float64
				if err := pe.UnmarshalMsgpack(b, &t); err != nil {
					return nil, err
				}
				return t, nil
			},
		}
	}
	return Codec{
		Encode: func(v any) ([]byte, error) { return msgpack.Marshal(v.(T)) },
		Append: msgpackAppend[T](),
		Decode: func(b []byte) (any, error) {
			var t T
			if err := pe.UnmarshalMsgpack(b, &t); err != nil {
				return nil, err
			}
			return t, nil
		},
	}
}

// msgpackAppend encodes T's with msgpack straight into the caller's
// buffer: msgpack.Marshal makes a buffer, grows it and hands it over, at
// each call; this keeps encoders (each with its writer) in a pool of
// the codec's own and reuses them. The bytes are Marshal's: an encoder is
// reset to Marshal's defaults before each use.
func msgpackAppend[T any]() func(dst []byte, v any) ([]byte, error) {
	pool := &sync.Pool{New: func() any { return &appender{enc: msgpack.NewEncoder(nil)} }}
	return func(dst []byte, v any) ([]byte, error) {
		if _, ok := v.(T); !ok {
			return dst, fmt.Errorf("a %T, want %s", v, reflect.TypeFor[T]())
		}
		a := pool.Get().(*appender)
		a.w.b = dst
		a.enc.Reset(&a.w)
		err := a.enc.Encode(v)
		out := a.w.b
		a.w.b = nil
		a.enc.Reset(nil) // (nothing of the caller's is kept in the pool)
		pool.Put(a)
		if err != nil {
			return dst, err
		}
		return out, nil
	}
}

// appender is a msgpack encoder writing to a byte slice.
type appender struct {
	enc *msgpack.Encoder
	w   appendWriter
}

// appendWriter appends what is written to b (the writer msgpack's
// encoder takes without wrapping: it has WriteByte).
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *appendWriter) WriteByte(c byte) error {
	w.b = append(w.b, c)
	return nil
}

// RegisterMsgpackType registers a message type whose payload is a T.
func RegisterMsgpackType[T any](name string) uint32 {
	c := MsgpackCodec[T]()
	return pe.RegisterType(pe.TypeInfo{Name: name, Encode: c.Encode, Append: c.Append, Decode: c.Decode})
}

// CollKind is what sort of collection a collection is.
type CollKind uint8

const (
	CollArray CollKind = iota + 1
	CollGroup
	CollMain
)

// MapKind is how an array places its elements initially; it also fixes each
// element's home PE (which knows where the element is).
type MapKind uint8

const (
	MapBlock MapKind = iota
	MapRoundRobin
	MapHash // sparse arrays without bounds
	MapUser // a registered placement function
)

// CreateMsg makes a collection on every PE.
type CreateMsg struct {
	Coll       uint32
	Kind       CollKind
	Type       uint32 // chare type (host registry)
	Name       string
	Bounds     []int // nil: sparse
	Map        MapKind
	MapFn      uint32 // MapUser: registered placement function
	Sparse     bool   // elements come by Insert; reductions wait for DoneInserting
	Migratable bool   // load balancers may move its elements
	Arg        Lazy
	Creator    int32
	// Relay: it travels the tree over every PE (Create), each PE passing
	// it on; else it is for the receiving PE alone (the main chare's,
	// handed to every PE as the run starts)
	Relay bool `msgpack:",omitempty"`
}

// InsertMsg creates one element on the receiving PE.
type InsertMsg struct {
	Coll  uint32
	Index pe.Index
	Arg   Lazy
}

// DoneInsertingMsg ends the insertion phase of a sparse array on every PE.
type DoneInsertingMsg struct {
	Coll uint32
	// Step: 0 asks a PE for its counts (down the tree over every PE),
	// 1 is a subtree's answer (Counts: the insertions its PEs sent, by
	// destination), 2 tells the PEs of a subtree how many insertions were
	// sent to each (Counts; a PE not listed: none): a PE is done once it
	// received them.
	Step   uint8
	Counts []InsertCount `msgpack:",omitempty"`
}

// InsertCount is a number of insertions sent to a PE.
type InsertCount struct {
	PE int32
	N  uint32
}

// CountMsg carries a subtree's contributor count to the tree parent once
// the counts are final (collections) or when a deletion changes them.
type CountMsg struct {
	Coll  uint32
	Sec   uint64
	From  uint32
	Count int64
	Final bool // the enable-time report (as opposed to a later change)
}

// LocMsg tells a PE where an element is (PE -1: deleted).
type LocMsg struct {
	Coll  uint32
	Index pe.Index
	PE    int32
	Moves uint32
	Sec   uint64 // the answer to a section's location query
}

// LocQueryMsg asks where an element is, for a section being built.
type LocQueryMsg struct {
	Coll  uint32
	Index pe.Index
	Sec   uint64
	From  int32
}

// MigrateMsg carries an element to its new PE.
type MigrateMsg struct {
	Coll    uint32
	Index   pe.Index
	State   []byte
	RedHome int32
	RedNo   uint32
	Bcast   uint64
	Moves   uint32
	Secs    []SecMembership
	AtSync  bool
	Epoch   uint32
	Held    []HeldContrib `msgpack:",omitempty"` // section contributions made at AtSync
	Sends   uint64        `msgpack:",omitempty"` // see Element.Sends
	Names   []FTName      `msgpack:",omitempty"` // Element.FTNames
}

// FTName is an entry of an element's ftlayer.ElementNames as its
// migration carries it.
type FTName struct {
	Name  pe.MsgName
	First int32
}

func packNames(n *ftlayer.ElementNames) []FTName {
	if n.Len() == 0 {
		return nil
	}
	out := make([]FTName, 0, n.Len())
	for k, v := range n.All() {
		out = append(out, FTName{Name: k, First: v})
	}
	return out
}

func unpackNames(ns []FTName) ftlayer.ElementNames {
	var out ftlayer.ElementNames
	for _, n := range ns {
		out.Add(n.Name, n.First)
	}
	return out
}

// SecMembership is an element's standing in one section.
type SecMembership struct {
	Sec   uint64
	Home  int32
	RedNo uint32
	Mult  uint32 // times the element is listed in the section (contributions per round)
	Count uint32 // contributions made to round RedNo so far
}

// MigrateReqMsg asks an element's PE to move it.
type MigrateReqMsg struct {
	Coll  uint32
	Index pe.Index
	To    int32
}

// DeleteMsg asks an element's PE to delete it.
type DeleteMsg struct {
	Coll  uint32
	Index pe.Index
}

// DeathMsg tells a reduction home that a contributor homed there was deleted.
type DeathMsg struct {
	Coll uint32
	Sec  uint64
	From uint32
}

// SectionMsg sets up a section on one PE of its tree.
type SectionMsg struct {
	Sec     uint64
	Coll    uint32
	Tree    []int // PEs, root first
	K       int
	Members []pe.Index
	Homes   []int32 // reduction/multicast home of each member
	// Replaces is the section this one replaces from that one's round
	// FirstRound on (0: none; see secrefresh.go); Ancestors is the whole
	// chain of replacements that led here, oldest first, the last being
	// Replaces -> Sec.
	Replaces   uint64     `msgpack:",omitempty"`
	FirstRound uint32     `msgpack:",omitempty"`
	Ancestors  []SecAlias `msgpack:",omitempty"`
}

// ContribMsg is a contribution sent to its contributor's reduction home.
type ContribMsg struct {
	Coll    uint32
	Sec     uint64
	Red     uint32
	Key     pe.Index
	Reducer uint32
	CB      Callback
	Value   []byte // reducer codec; nil in process (see contribPayload)
	v       any
}

// PartialMsg is a partial result for the tree parent.
type PartialMsg struct {
	Coll    uint32
	Sec     uint64
	Red     uint32
	Reducer uint32
	CB      Callback
	Count   int64
	Witness pe.Index
	Keys    []pe.Index
	Vals    [][]byte
	Acc     []byte
	// Complete and Result: a kept result (Partial.Complete), encoded by
	// the reducer's ResultCodec (its Codec when it has none).
	Complete bool   `msgpack:",omitempty"`
	Result   []byte `msgpack:",omitempty"`
	p        *Partial
	// owned: the values among p's items that this PE contributed, for
	// its reducer to reuse when the message log releases this message
	// (Manager.logReleased); never sent.
	owned []any
}

// FutureMsg fills a future on its PE.
type FutureMsg struct {
	ID    uint64
	Value Lazy
}

// SyncMsg reports elements that reached AtSync on a PE (to PE 0, up the
// tree over every PE): the first phase of a balancing step, which says
// when every element is there.
type SyncMsg struct {
	Coll    uint32
	Epoch   uint32
	Indices []pe.Index
	PEs     []int32
	From    int32
}

// LBCollectMsg asks a PE (down the collection's tree, from PE 0) for its
// subtree's part of a balancing step's statistics: the second phase.
type LBCollectMsg struct {
	Coll     uint32
	Periodic bool // a periodic step (+LBPeriod)
}

// LBPartMsg is a subtree's part of a step's statistics, going up the tree
// (each PE merges its children's with its own): the elements of the
// collection being balanced with their loads, memberships and what they
// sent, the PEs' other chares, and every PE's own figures.
type LBPartMsg struct {
	Coll    uint32
	Indices []pe.Index
	PEs     []int32
	Loads   []ObjLoad // by Indices
	Others  []OtherObj
	Comm    []ObjComm // From indexes Indices, then Others
	Figs    []PEFigure
}

// PEFigure is one PE's own figures in a step's statistics.
type PEFigure struct {
	PE    int32
	Stats loadbalance.PEStats
}

// PlanMsg is the load balancer's decision for one AtSync epoch.
type PlanMsg struct {
	Coll     uint32
	Epoch    uint32
	Moves    []Move
	Periodic bool      // of a periodic step: nobody waits at AtSync
	Round    PlanRound // on its way round through PE 0's witness (see syncPlan)
	// Relay: it goes down the tree over every PE, each PE passing it on
	Relay bool `msgpack:",omitempty"`
}

// PlanRound is where a plan is on its way from PE 0's strategy, through
// PE 0's witness (ftlayer.Hook.Witness) and back, to every PE.
type PlanRound uint8

const (
	RoundNone PlanRound = iota // to every PE: carry it out
	RoundOut                   // PE 0 to its witness
	RoundBack                  // the witness back to PE 0
)

// Move migrates one element.
type Move struct {
	Index pe.Index
	From  int32
	To    int32
}

// PlanDoneMsg says a PE finished its part of a plan.
type PlanDoneMsg struct {
	Coll       uint32
	Epoch      uint32
	MovedBytes int64 // packed state this PE's subtree sent away
}

// ResumeMsg ends an AtSync epoch.
type ResumeMsg struct {
	Coll  uint32
	Epoch uint32
	// Relay: it goes down the tree over every PE, each PE passing it on
	Relay bool `msgpack:",omitempty"`
}

// QDProbeMsg / QDReplyMsg run quiescence detection waves.
type QDProbeMsg struct {
	Wave uint64
	Req  bool // a request to PE 0 (or, with Done, its answer)
	Done bool
	Idle bool // every PE of the process was parked
	Tag  uint64
	From int32
}

// QDReplyMsg answers a probe with the counters of a PE's subtree: the
// sums over PEs of its PEs.
type QDReplyMsg struct {
	Wave      uint64
	Sent      uint64
	Processed uint64
	PEs       int32
}

var (
	tCreate, tInsert, tDone, tCount, tLoc, tMigrate, tMigrateReq, tDelete, tDeath uint32
	tSection, tContrib, tPartial, tFuture, tSync, tPlan, tPlanDone, tResume       uint32
	tQDProbe, tQDReply, tLocQuery                                                 uint32
	tSecRefresh, tSecAlias, tSecAck, tLBTick, tLBCollect, tLBPart                 uint32
)

func init() {
	tCreate = RegisterMsgpackType[*CreateMsg]("mgr.create")
	tInsert = RegisterMsgpackType[*InsertMsg]("mgr.insert")
	tDone = RegisterMsgpackType[*DoneInsertingMsg]("mgr.doneInserting")
	tCount = RegisterMsgpackType[*CountMsg]("mgr.count")
	tLoc = RegisterMsgpackType[*LocMsg]("mgr.loc")
	tMigrate = RegisterMsgpackType[*MigrateMsg]("mgr.migrate")
	tMigrateReq = RegisterMsgpackType[*MigrateReqMsg]("mgr.migrateReq")
	tDelete = RegisterMsgpackType[*DeleteMsg]("mgr.delete")
	tDeath = RegisterMsgpackType[*DeathMsg]("mgr.death")
	tSection = RegisterMsgpackType[*SectionMsg]("mgr.section")
	tContrib = pe.RegisterType(pe.TypeInfo{Name: "mgr.contrib", Encode: encodeContrib, Decode: decodeContrib})
	tPartial = pe.RegisterType(pe.TypeInfo{Name: "mgr.partial", Encode: encodePartial, Decode: decodePartial})
	tFuture = RegisterMsgpackType[*FutureMsg]("mgr.future")
	tSync = RegisterMsgpackType[*SyncMsg]("mgr.sync")
	tPlan = RegisterMsgpackType[*PlanMsg]("mgr.plan")
	tPlanDone = RegisterMsgpackType[*PlanDoneMsg]("mgr.planDone")
	tResume = RegisterMsgpackType[*ResumeMsg]("mgr.resume")
	tQDProbe = RegisterMsgpackType[*QDProbeMsg]("mgr.qdProbe")
	tQDReply = RegisterMsgpackType[*QDReplyMsg]("mgr.qdReply")
	tLocQuery = RegisterMsgpackType[*LocQueryMsg]("mgr.locQuery")
	tSecRefresh = RegisterMsgpackType[*SecRefreshMsg]("mgr.secRefresh")
	tSecAlias = RegisterMsgpackType[*SecAliasMsg]("mgr.secAlias")
	tSecAck = RegisterMsgpackType[*SecAckMsg]("mgr.secAck")
	tLBTick = RegisterMsgpackType[*LBTickMsg]("mgr.lbTick")
	tLBCollect = RegisterMsgpackType[*LBCollectMsg]("mgr.lbCollect")
	tLBPart = RegisterMsgpackType[*LBPartMsg]("mgr.lbPart")
}

func reducerCodec(id uint32) (*Reducer, error) {
	r := LookupReducer(id)
	if r == nil {
		return nil, fmt.Errorf("unknown reducer %d", id)
	}
	if r.Codec.Encode == nil {
		return nil, fmt.Errorf("reducer %s has no codec", r.Name)
	}
	return r, nil
}

// accCodec is the codec of r's accumulators in partials.
func accCodec(r *Reducer) Codec {
	if r.AccCodec.Encode != nil && r.AccCodec.Decode != nil {
		return r.AccCodec
	}
	return r.Codec
}

// resultCodec is the codec of reducer id's results.
func resultCodec(id uint32) (Codec, error) {
	r, err := reducerCodec(id)
	if err != nil {
		return Codec{}, err
	}
	if r.ResultCodec.Encode != nil && r.ResultCodec.Decode != nil {
		return r.ResultCodec, nil
	}
	return r.Codec, nil
}

func encodeContrib(v any) ([]byte, error) {
	m := *v.(*ContribMsg)
	r, err := reducerCodec(m.Reducer)
	if err != nil {
		return nil, err
	}
	if m.Value, err = r.Codec.Encode(m.v); err != nil {
		return nil, err
	}
	return msgpack.Marshal(&m)
}

func decodeContrib(b []byte) (any, error) {
	m := new(ContribMsg)
	if err := pe.UnmarshalMsgpack(b, m); err != nil {
		return nil, err
	}
	r, err := reducerCodec(m.Reducer)
	if err != nil {
		return nil, err
	}
	if m.v, err = r.Codec.Decode(m.Value); err != nil {
		return nil, fmt.Errorf("reducer %s value: %w", r.Name, err)
	}
	m.Value = nil
	return m, nil
}

func encodePartial(v any) ([]byte, error) {
	m := *v.(*PartialMsg)
	p := m.p
	m.Red, m.Reducer, m.CB, m.Count, m.Witness = p.Red, p.Reducer, p.CB, p.Count, p.Witness
	if p.Complete {
		c, err := resultCodec(p.Reducer)
		if err != nil {
			return nil, err
		}
		m.Complete = true
		if m.Result, err = c.Encode(p.Result); err != nil {
			return nil, err
		}
		return msgpack.Marshal(&m)
	}
	if p.Count > 0 {
		r, err := reducerCodec(p.Reducer)
		if err != nil {
			return nil, err
		}
		if r.Exact {
			if m.Acc, err = accCodec(r).Encode(p.Acc); err != nil {
				return nil, err
			}
		} else {
			m.Keys = make([]pe.Index, len(p.Items))
			m.Vals = make([][]byte, len(p.Items))
			for i, it := range p.Items {
				m.Keys[i] = it.Key
				if m.Vals[i], err = r.Codec.Encode(it.Value); err != nil {
					return nil, err
				}
			}
		}
	}
	return msgpack.Marshal(&m)
}

func decodePartial(b []byte) (any, error) {
	m := new(PartialMsg)
	if err := pe.UnmarshalMsgpack(b, m); err != nil {
		return nil, err
	}
	p := &Partial{Red: m.Red, Reducer: m.Reducer, CB: m.CB, Count: m.Count, Witness: m.Witness, owned: true}
	if m.Count < 0 {
		return nil, fmt.Errorf("negative contribution count %d", m.Count)
	}
	if m.Complete {
		if len(m.Keys)+len(m.Vals)+len(m.Acc) > 0 {
			return nil, fmt.Errorf("a kept result that carries contributions too")
		}
		c, err := resultCodec(m.Reducer)
		if err != nil {
			return nil, err
		}
		if p.Result, err = c.Decode(m.Result); err != nil {
			return nil, fmt.Errorf("reducer %s result: %w", reducerName(m.Reducer), err)
		}
		p.Complete = true
		m.p, m.Result = p, nil
		return m, nil
	}
	if m.Count > 0 {
		r, err := reducerCodec(m.Reducer)
		if err != nil {
			return nil, err
		}
		if r.Exact {
			if p.Acc, err = accCodec(r).Decode(m.Acc); err != nil {
				return nil, fmt.Errorf("reducer %s accumulator: %w", r.Name, err)
			}
		} else {
			if len(m.Keys) != len(m.Vals) || int64(len(m.Keys)) != m.Count {
				return nil, fmt.Errorf("partial has %d keys, %d values, count %d", len(m.Keys), len(m.Vals), m.Count)
			}
			p.Items = make([]Item, len(m.Keys))
			for i := range m.Keys {
				if i > 0 && m.Keys[i-1].Compare(m.Keys[i]) > 0 {
					return nil, fmt.Errorf("partial items out of order at %d", i)
				}
				v, err := r.Codec.Decode(m.Vals[i])
				if err != nil {
					return nil, fmt.Errorf("reducer %s item %d: %w", r.Name, i, err)
				}
				p.Items[i] = Item{Key: m.Keys[i], Value: v}
			}
		}
	}
	m.p, m.Keys, m.Vals, m.Acc = p, nil, nil, nil
	return m, nil
}

// CreateType is the message type that creates a collection (for launchers
// that inject the main chare's creation).
func CreateType() uint32 { return tCreate }

// headerBytes approximates a contribution's or partial's fixed fields on
// the wire (ids, round, reducer, callback, index).
const headerBytes = 64

// WireSize approximates the message's size on the wire (for statistics,
// such as a message log's bytes) without encoding it.
func (c *ContribMsg) WireSize() int {
	if c.Value != nil {
		return headerBytes + len(c.Value)
	}
	return headerBytes + max(PayloadSize(c.v), 0)
}

// WireSize approximates the message's size on the wire without encoding it.
func (p *PartialMsg) WireSize() int {
	n := headerBytes + len(p.Acc)
	for _, v := range p.Vals {
		n += len(v) + 4*pe.MaxDims
	}
	n += len(p.Result)
	if q := p.p; q != nil {
		n += max(PayloadSize(q.Acc), 0) + max(PayloadSize(q.Result), 0)
		for _, it := range q.Items {
			n += 4*pe.MaxDims + max(PayloadSize(it.Value), 0)
		}
	}
	return n
}

// indexBytes approximates an index on the wire (its dimensions and
// coordinates).
const indexBytes = 1 + 4*pe.MaxDims

// WireSize approximates the message's size on the wire without encoding
// it: a message log measures every location message it keeps.
func (l *LocMsg) WireSize() int { return 4 + indexBytes + 4 + 4 + 8 }

// WireSize approximates the message's size on the wire without encoding it.
func (q *LocQueryMsg) WireSize() int { return 4 + indexBytes + 8 + 4 }

// WireSize approximates the message's size on the wire without encoding
// it (the element's packed state is most of it).
func (mm *MigrateMsg) WireSize() int {
	return 4 + indexBytes + len(mm.State) + 4 + 4 + 8 + 4 + len(mm.Secs)*(8+4*4) + 1 + 4
}

// WireSize approximates the message's size on the wire without encoding it.
func (sm *SectionMsg) WireSize() int {
	return 8 + 4 + 8*len(sm.Tree) + 8 + len(sm.Members)*indexBytes + 4*len(sm.Homes)
}

// WireSize approximates the message's size on the wire without encoding
// it (a plan lists every element that moves, each a struct whose field
// names travel too).
func (p *PlanMsg) WireSize() int { return 4 + 4 + len(p.Moves)*(2*indexBytes+20) }

// WireSize approximates the message's size on the wire without encoding it.
func (sm *SyncMsg) WireSize() int { return 4 + 4 + len(sm.Indices)*indexBytes + 4*len(sm.PEs) }
