package pe

import (
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"
)

// Kind says what a message is for. The fault-tolerance layer logs each kind
// differently (CAMEL paper §3), and statistics are split by it.
type Kind uint8

const (
	// KindP2P is a point-to-point entry-method invocation.
	KindP2P Kind = iota
	// KindMulticast is one hop of a section multicast or collection broadcast.
	KindMulticast
	// KindReduction carries a reduction contribution or partial result.
	KindReduction
	// KindSystem is runtime bookkeeping: locations, migration, creation,
	// quiescence, load balancing. System messages overtake application ones.
	KindSystem
	numKinds
)

func (k Kind) String() string {
	switch k {
	case KindP2P:
		return "p2p"
	case KindMulticast:
		return "multicast"
	case KindReduction:
		return "reduction"
	case KindSystem:
		return "system"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Envelope is the unit every PE queue holds. It is passed by value so that
// enqueueing allocates nothing; the payload is handed over by the sender and
// must not be mutated after the send.
type Envelope struct {
	Type    uint32 // registered message type: an entry method or a system message
	Coll    uint32 // collection (array, group, main) the message addresses
	Kind    Kind
	Flags   uint8
	Src     int32 // PE that sent this hop
	Index   Index // destination element, when the message addresses one
	Seq     uint64
	Aux     uint64 // must follow Seq: together they are the inline payload area
	Payload any
	// FT is the message-logging protocol's stamp (nil when no protocol
	// logs this message).
	FT *FTHeader
}

// FlagAppLane sends a system message in the application lane: it is
// handled behind the application messages its sender sent before it,
// instead of overtaking them (a marker that says they were all sent).
// Within that, the flag bits below 0x20 are the layer above's.
const FlagAppLane uint8 = 0x20

// SystemLane reports whether env goes in the system lane, which the
// receiving PE empties first.
func (e *Envelope) SystemLane() bool { return e.Kind == KindSystem && e.Flags&FlagAppLane == 0 }

// InlineSize is how many bytes of payload a plain point-to-point message can
// carry in Seq and Aux instead of Payload (no allocation, no pointer chase).
const InlineSize = 16

// Inline returns the 16-byte inline payload area (Seq and Aux).
func (e *Envelope) Inline() unsafe.Pointer { return unsafe.Pointer(&e.Seq) }

func init() {
	var e Envelope
	if unsafe.Offsetof(e.Aux) != unsafe.Offsetof(e.Seq)+8 {
		panic("pe: Envelope.Seq and Aux must be adjacent")
	}
}

// TypeInfo describes how one registered message type crosses a process
// boundary.
type TypeInfo struct {
	Name   string
	Encode func(v any) ([]byte, error)
	// Append, where set, is Encode appending to dst (what EncodeEnvelope
	// uses then: the payload's bytes go straight into the frame, with no
	// buffer of their own). It returns dst unchanged with an error.
	Append func(dst []byte, v any) ([]byte, error)
	// Decode makes a payload of its encoding. b is the decoder's only
	// during the call (a connection's reader reads the next frame over
	// it): what the payload keeps of it must be copied.
	Decode func(b []byte) (any, error)
	// Measured: its messages carry measurements, which differ from one
	// execution to the next (chare.Measurement).
	Measured bool
}

// messageTypes is the registry of message types: ids derived from names
// (see Registry), filled by package-level variable initializers (which Go
// runs, dependencies first, before any init function).
var messageTypes = NewRegistry[TypeInfo]("message type")

// RegisterType adds a message type and returns its id, which is derived
// from its name: every process agrees on it whatever order its packages
// registered in. Registering a name twice, or a new name once a run has
// started (SealTypes), panics: two message types with one name could not
// be told apart on the wire, and a process must know every type before a
// message names it.
func RegisterType(ti TypeInfo) uint32 {
	id, err := messageTypes.Add(ti.Name, ti)
	if err != nil {
		panic("pe.RegisterType: " + err.Error())
	}
	return id
}

// SealTypes ends the registration of new message types (a run started).
func SealTypes() { messageTypes.Seal() }

// TypesDigest identifies the registered message types: processes of one
// job must agree on it (they run one program).
func TypesDigest() uint64 { return messageTypes.Digest() }

// LookupType returns the registered type with this id.
func LookupType(id uint32) (TypeInfo, bool) { return messageTypes.Get(id) }

// Measured reports whether messages of type id carry measurements
// (TypeInfo.Measured).
func Measured(id uint32) bool {
	ti, ok := LookupType(id)
	return ok && ti.Measured
}

// TypeName names a message type for error messages.
func TypeName(id uint32) string {
	if ti, ok := LookupType(id); ok {
		return ti.Name
	}
	return fmt.Sprintf("type#%d", id)
}

const (
	wireVersion   = 1
	headerSize    = 4 + 4 + 4 + 4 + 4*MaxDims + 8 + 8 + 4
	flagNilPaylod = 0x80 // wire-only: the payload was nil
)

// EncodeEnvelope appends the wire form of env to dst: a fixed little-endian
// header (no reflection: the header is on every message) followed by the
// payload encoded by its registered type.
func EncodeEnvelope(dst []byte, env *Envelope) ([]byte, error) {
	var ti TypeInfo
	flags := env.Flags &^ (flagNilPaylod | flagFT)
	if env.FT != nil {
		flags |= flagFT
	}
	if env.Payload == nil {
		flags |= flagNilPaylod
	} else {
		var ok bool
		if ti, ok = LookupType(env.Type); !ok || (ti.Encode == nil && ti.Append == nil) {
			return dst, fmt.Errorf("encode envelope: message type %d is not registered", env.Type)
		}
	}
	var payload []byte
	if env.Payload != nil && ti.Append == nil {
		var err error
		if payload, err = ti.Encode(env.Payload); err != nil {
			return dst, fmt.Errorf("encode %s payload: %w", ti.Name, err)
		}
	}
	start := len(dst)
	dst = slices.Grow(dst, headerSize)[:start+headerSize]
	h := dst[start:]
	h[0] = wireVersion
	h[1] = byte(env.Kind)
	h[2] = flags
	h[3] = env.Index.Dims
	binary.LittleEndian.PutUint32(h[4:], env.Type)
	binary.LittleEndian.PutUint32(h[8:], env.Coll)
	binary.LittleEndian.PutUint32(h[12:], uint32(env.Src))
	for i := 0; i < MaxDims; i++ {
		binary.LittleEndian.PutUint32(h[16+4*i:], uint32(env.Index.C[i]))
	}
	o := 16 + 4*MaxDims
	binary.LittleEndian.PutUint64(h[o:], env.Seq)
	binary.LittleEndian.PutUint64(h[o+8:], env.Aux)
	if env.FT != nil {
		dst = appendFT(dst, env.FT)
	}
	if env.Payload != nil && ti.Append != nil {
		at := len(dst)
		var err error
		if dst, err = ti.Append(dst, env.Payload); err != nil {
			return dst[:start], fmt.Errorf("encode %s payload: %w", ti.Name, err)
		}
		payload = dst[at:]
	} else {
		dst = append(dst, payload...)
	}
	binary.LittleEndian.PutUint32(dst[start+o+16:], uint32(len(payload)))
	return dst, nil
}

// DecodeEnvelope reads one envelope from the front of b and returns the number
// of bytes it used. Errors name the byte offset and field at fault; bytes
// from another process are never trusted.
func DecodeEnvelope(b []byte) (Envelope, int, error) {
	var env Envelope
	if len(b) < headerSize {
		return env, 0, fmt.Errorf("decode envelope: %d bytes, a header needs %d", len(b), headerSize)
	}
	if b[0] != wireVersion {
		return env, 0, fmt.Errorf("decode envelope: byte 0: wire version %d, want %d", b[0], wireVersion)
	}
	if Kind(b[1]) >= numKinds {
		return env, 0, fmt.Errorf("decode envelope: byte 1: unknown message kind %d", b[1])
	}
	env.Kind = Kind(b[1])
	flags := b[2]
	env.Flags = flags &^ (flagNilPaylod | flagFT)
	if b[3] > MaxDims {
		return env, 0, fmt.Errorf("decode envelope: byte 3: index has %d dimensions, at most %d", b[3], MaxDims)
	}
	env.Index.Dims = b[3]
	env.Type = binary.LittleEndian.Uint32(b[4:])
	env.Coll = binary.LittleEndian.Uint32(b[8:])
	env.Src = int32(binary.LittleEndian.Uint32(b[12:]))
	for i := 0; i < MaxDims; i++ {
		v := int32(binary.LittleEndian.Uint32(b[16+4*i:]))
		if i >= int(env.Index.Dims) && v != 0 {
			return env, 0, fmt.Errorf("decode envelope: byte %d: coordinate %d set beyond the index's %d dimensions", 16+4*i, i, env.Index.Dims)
		}
		env.Index.C[i] = v
	}
	o := 16 + 4*MaxDims
	env.Seq = binary.LittleEndian.Uint64(b[o:])
	env.Aux = binary.LittleEndian.Uint64(b[o+8:])
	n := binary.LittleEndian.Uint32(b[o+16:])
	start := headerSize
	if flags&flagFT != 0 {
		h, used, err := decodeFT(b[headerSize:], headerSize)
		if err != nil {
			return env, 0, err
		}
		env.FT = h
		start += used
	}
	if uint64(n) > uint64(len(b)-start) {
		return env, 0, fmt.Errorf("decode envelope: byte %d: payload length %d, only %d bytes follow", o+16, n, len(b)-start)
	}
	ti, ok := LookupType(env.Type)
	if !ok {
		return env, 0, fmt.Errorf("decode envelope: byte 4: unknown message type %d", env.Type)
	}
	total := start + int(n)
	if flags&flagNilPaylod != 0 {
		if n != 0 {
			return env, 0, fmt.Errorf("decode envelope: byte %d: nil payload with length %d", o+16, n)
		}
		return env, total, nil
	}
	if ti.Decode == nil {
		return env, 0, fmt.Errorf("decode envelope: message type %s has no decoder", ti.Name)
	}
	v, err := ti.Decode(b[start:total])
	if err != nil {
		return env, 0, fmt.Errorf("decode envelope: byte %d: %s payload: %w", start, ti.Name, err)
	}
	env.Payload = v
	return env, total, nil
}
