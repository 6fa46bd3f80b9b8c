package pe

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxMsgpackDepth is the deepest nesting of arrays and maps CheckMsgpack
// lets through.
const MaxMsgpackDepth = 512

// CheckMsgpack checks that b starts with one whole msgpack value whose
// every array, map, string, binary and extension declares no more
// elements or bytes than there are bytes left after it, nested no deeper
// than MaxMsgpackDepth. msgpack (v5.4.1) allocates an array's declared
// length before it reads an element — its allocation limit is never on
// (decode_slice.go tests the limit's flag bit against 1) — so four bytes
// claiming 2^31 elements cost gigabytes; after this check, what decoding
// b allocates is bounded by b's length. Bytes after the value are not
// looked at.
func CheckMsgpack(b []byte) error {
	// open[i]: the values level i still holds (level 0: the one value)
	open := make([]uint64, 1, 8)
	open[0] = 1
	off := 0
	for len(open) > 0 {
		top := len(open) - 1
		if open[top] == 0 {
			open = open[:top]
			continue
		}
		open[top]--
		if off >= len(b) {
			return fmt.Errorf("msgpack: byte %d: the value ends early (%d bytes)", off, len(b))
		}
		at := off
		c := b[off]
		off++
		var fixed uint64 // bytes of data that follow the code
		var lenBytes int // bytes of a length that follows the code
		var perElem uint64
		var count uint64 // elements of an array or map (fixed forms)
		container := false
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			container, count, perElem = true, uint64(c&0x0f), 2
		case c >= 0x90 && c <= 0x9f:
			container, count, perElem = true, uint64(c&0x0f), 1
		case c >= 0xa0 && c <= 0xbf:
			fixed = uint64(c & 0x1f)
		case c == 0xc4 || c == 0xd9: // bin8, str8
			lenBytes = 1
		case c == 0xc5 || c == 0xda:
			lenBytes = 2
		case c == 0xc6 || c == 0xdb:
			lenBytes = 4
		case c == 0xc7: // ext8: length, type, data
			lenBytes, fixed = 1, 1
		case c == 0xc8:
			lenBytes, fixed = 2, 1
		case c == 0xc9:
			lenBytes, fixed = 4, 1
		case c == 0xca || c == 0xce || c == 0xd2:
			fixed = 4
		case c == 0xcb || c == 0xcf || c == 0xd3:
			fixed = 8
		case c == 0xcc || c == 0xd0:
			fixed = 1
		case c == 0xcd || c == 0xd1:
			fixed = 2
		case c >= 0xd4 && c <= 0xd8: // fixext 1, 2, 4, 8, 16: type and data
			fixed = 1 + 1<<(c-0xd4)
		case c == 0xdc:
			container, lenBytes, perElem = true, 2, 1
		case c == 0xdd:
			container, lenBytes, perElem = true, 4, 1
		case c == 0xde:
			container, lenBytes, perElem = true, 2, 2
		case c == 0xdf:
			container, lenBytes, perElem = true, 4, 2
		default:
			return fmt.Errorf("msgpack: byte %d: code %#x is not used by the format", at, c)
		}
		var n uint64
		if lenBytes > 0 {
			if len(b)-off < lenBytes {
				return fmt.Errorf("msgpack: byte %d: the value ends early (%d bytes)", at, len(b))
			}
			for i := 0; i < lenBytes; i++ {
				n = n<<8 | uint64(b[off+i])
			}
			off += lenBytes
		}
		left := uint64(len(b) - off)
		if container {
			if lenBytes == 0 {
				n = count
			}
			if n > left/perElem { // every element takes a byte at least
				return fmt.Errorf("msgpack: byte %d: %d elements declared, %d bytes left", at, n*perElem, left)
			}
			if n > 0 {
				if len(open) >= MaxMsgpackDepth {
					return fmt.Errorf("msgpack: byte %d: nested deeper than %d", at, MaxMsgpackDepth)
				}
				open = append(open, n*perElem)
			}
			continue
		}
		need := fixed + n
		if need > left {
			return fmt.Errorf("msgpack: byte %d: %d bytes declared, %d left", at, need, left)
		}
		off += int(need)
	}
	return nil
}

// UnmarshalMsgpack is msgpack.Unmarshal of bytes from outside the process
// (the network, files): CheckMsgpack first.
func UnmarshalMsgpack(b []byte, v any) error {
	if err := CheckMsgpack(b); err != nil {
		return err
	}
	return msgpack.Unmarshal(b, v)
}
