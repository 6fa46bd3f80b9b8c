package chare

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// binSum is the running element-wise sum of float64 vectors that
// SumFloat64s and SumFloat64 reduce with. Its result depends only on the
// terms, not on their order or grouping, so partial sums combine anywhere
// in a reduction tree, as soon as a contribution is made, and the result
// is bitwise identical across runs, PE counts, migrations and recoveries.
//
// Each term's 53-bit mantissa is cut, at fixed absolute bit positions (32
// bits apart, counted from 2^-1074), into at most three integer pieces,
// and each piece is added to the integer bin of its position: bins are
// never carried into one another, so every bin holds the exact sum of its
// pieces, whatever the order. An element keeps the three bins ending at
// the highest bin any of its terms reached (its top); pieces below them
// are dropped. That keeps at least 64 bits below the largest term's
// leading bit: the result is the sum of the terms so truncated, rounded
// once to the nearest float64 (ties to even) — within n·2^-63 of the
// largest |term| of the exact sum, where a left-to-right fold's error
// bound is n·2^-53 of the sum of |terms|. NaN and infinities propagate as
// in IEEE arithmetic; a sum of zeros is +0.
type binSum struct {
	top     []int32 // per element: the highest bin kept; noTop before any finite non-zero term
	bins    []int64 // per element: bins top-2, top-1, top
	special []uint8 // per element (nil while none): specialNaN, specialPosInf, specialNegInf
	terms   uint64  // terms added, merged sums' included
}

const (
	noTop         = math.MinInt32
	specialNaN    = 1
	specialPosInf = 2
	specialNegInf = 4
	// maxTerms keeps every bin exact: a piece is below 2^32, an int64 bin
	// holds 2^31 of them.
	maxTerms = 1 << 31
	fracMask = 1<<52 - 1
)

func newBinSum(n int) *binSum {
	s := &binSum{top: make([]int32, n), bins: make([]int64, 3*n)}
	for i := range s.top {
		s.top[i] = noTop
	}
	return s
}

// add adds x element by element; len(x) must be the sum's length.
func (s *binSum) add(x []float64) error {
	if len(x) != len(s.top) {
		return fmt.Errorf("contributions of %d and %d elements", len(s.top), len(x))
	}
	if s.terms++; s.terms > maxTerms {
		return fmt.Errorf("more than %d terms in one sum", uint64(maxTerms))
	}
	top, bins := s.top, s.bins[:3*len(s.top)]
	for i, v := range x {
		u := math.Float64bits(v)
		e := int32(u>>52) & 0x7ff
		m := u & fracMask
		switch {
		case e == 0x7ff:
			s.addSpecial(i, v)
			continue
		case e == 0:
			if m == 0 {
				continue // ±0 adds nothing
			}
			e = 1 // subnormal: the same scale as the smallest normal
		default:
			m |= 1 << 52
		}
		// v = ±m·2^(e-1075): m's lowest bit is at position e-1 above
		// 2^-1074, in bin lo; its 53 bits reach bin lo+1 or lo+2.
		q := e - 1
		lo := q >> 5
		sh := uint(q & 31)
		hi, w := bits.Mul64(m, 1<<sh) // m<<sh, in 128 bits: hi holds 20 at most
		neg := int64(u) >> 63         // -1 for a negative term
		p0 := (int64(w&0xffffffff) ^ neg) - neg
		p1 := (int64(w>>32) ^ neg) - neg
		p2 := (int64(hi) ^ neg) - neg
		vt := lo + 1 + int32(sh+20)>>5 // the bin of its leading bit
		t := top[i]
		b := bins[3*i : 3*i+3 : 3*i+3]
		if vt > t {
			shiftBins(b, t, vt)
			top[i], t = vt, vt
		}
		switch lo - t + 2 { // where p0's bin is among the three kept
		case 1:
			b[1] += p0
			b[2] += p1 // p2 is 0: the leading bit is in bin lo+1
		case 0:
			b[0] += p0
			b[1] += p1
			b[2] += p2
		case -1:
			b[0] += p1
			b[1] += p2
		case -2:
			b[0] += p2
		}
	}
	return nil
}

// shiftBins moves b, the bins ending at from, to end at to (> from),
// dropping those that fall below.
func shiftBins(b []int64, from, to int32) {
	if from == noTop || to-from >= 3 {
		b[0], b[1], b[2] = 0, 0, 0
		return
	}
	if to-from == 1 {
		b[0], b[1], b[2] = b[1], b[2], 0
	} else {
		b[0], b[1], b[2] = b[2], 0, 0
	}
}

func (s *binSum) addSpecial(i int, v float64) {
	if s.special == nil {
		s.special = make([]uint8, len(s.top))
	}
	switch {
	case math.IsNaN(v):
		s.special[i] |= specialNaN
	case v > 0:
		s.special[i] |= specialPosInf
	default:
		s.special[i] |= specialNegInf
	}
}

// merge adds o's terms to s.
func (s *binSum) merge(o *binSum) error {
	if len(o.top) != len(s.top) {
		return fmt.Errorf("contributions of %d and %d elements", len(s.top), len(o.top))
	}
	if s.terms += o.terms; s.terms > maxTerms {
		return fmt.Errorf("more than %d terms in one sum", uint64(maxTerms))
	}
	for i, ot := range o.top {
		if ot == noTop {
			continue
		}
		b := s.bins[3*i : 3*i+3 : 3*i+3]
		ob := o.bins[3*i : 3*i+3 : 3*i+3]
		t := s.top[i]
		if ot > t {
			shiftBins(b, t, ot)
			s.top[i], t = ot, ot
		}
		// o's bins, aligned to end at t
		for k := 0; k < 3; k++ {
			if j := k - int(t-ot); j >= 0 {
				b[j] += ob[k]
			}
		}
	}
	if o.special != nil {
		if s.special == nil {
			s.special = make([]uint8, len(s.top))
		}
		for i, f := range o.special {
			s.special[i] |= f
		}
	}
	return nil
}

func (s *binSum) clone() *binSum {
	c := &binSum{top: append([]int32(nil), s.top...), bins: append([]int64(nil), s.bins...), terms: s.terms}
	if s.special != nil {
		c.special = append([]uint8(nil), s.special...)
	}
	return c
}

// result rounds each element's sum to the nearest float64.
func (s *binSum) result() []float64 {
	out := make([]float64, len(s.top))
	for i, t := range s.top {
		if s.special != nil && s.special[i] != 0 {
			f := s.special[i]
			switch {
			case f&specialNaN != 0 || f&(specialPosInf|specialNegInf) == specialPosInf|specialNegInf:
				out[i] = math.NaN()
			case f&specialPosInf != 0:
				out[i] = math.Inf(1)
			default:
				out[i] = math.Inf(-1)
			}
			continue
		}
		if t != noTop {
			out[i] = roundBins(s.bins[3*i:3*i+3], t)
		}
	}
	return out
}

// roundBins is b0 + b1·2^32 + b2·2^64, times 2^(32(top-2) - 1074),
// rounded to the nearest float64 (ties to even).
func roundBins(b []int64, top int32) float64 {
	// the 192-bit two's complement sum, little-endian words
	var w [3]uint64
	addTerm := func(v int64, shift uint) {
		sign := uint64(v >> 63)
		var t [3]uint64
		switch shift {
		case 0:
			t = [3]uint64{uint64(v), sign, sign}
		case 32:
			t = [3]uint64{uint64(v) << 32, uint64(v >> 32), sign}
		case 64:
			t = [3]uint64{0, uint64(v), sign}
		}
		var c uint64
		w[0], c = bits.Add64(w[0], t[0], 0)
		w[1], c = bits.Add64(w[1], t[1], c)
		w[2], _ = bits.Add64(w[2], t[2], c)
	}
	addTerm(b[0], 0)
	addTerm(b[1], 32)
	addTerm(b[2], 64)
	negative := w[2]>>63 != 0
	if negative { // magnitude: two's complement negation
		var c uint64
		w[0], c = bits.Add64(^w[0], 1, 0)
		w[1], c = bits.Add64(^w[1], 0, c)
		w[2], _ = bits.Add64(^w[2], 0, c)
	}
	n := bitLen(w)
	if n == 0 {
		return 0
	}
	scale := 32*(int(top)-2) - 1074 // the weight of w's bit 0 is 2^scale
	msb := n - 1 + scale            // the leading bit's weight
	low := max(msb-52, -1074)       // the lowest bit a float64 keeps here
	r := low - scale                // that bit's position in w
	var mant uint64
	if r <= 0 {
		mant = w[0] << uint(-r) // all of w fits (n ≤ 53)
	} else {
		mant = shiftRight(w, uint(r))
		half := bitAt(w, uint(r-1))
		sticky := r >= 2 && anyBelow(w, uint(r-1))
		if half && (sticky || mant&1 != 0) {
			mant++ // may carry to 2^53: still exact as a float64 below
		}
	}
	v := math.Ldexp(float64(mant), low)
	if negative {
		v = -v
	}
	return v
}

func bitLen(w [3]uint64) int {
	switch {
	case w[2] != 0:
		return 128 + bits.Len64(w[2])
	case w[1] != 0:
		return 64 + bits.Len64(w[1])
	}
	return bits.Len64(w[0])
}

// shiftRight is the low 64 bits of w >> r.
func shiftRight(w [3]uint64, r uint) uint64 {
	for r >= 64 {
		w[0], w[1], w[2] = w[1], w[2], 0
		r -= 64
	}
	if r == 0 {
		return w[0]
	}
	return w[0]>>r | w[1]<<(64-r)
}

func bitAt(w [3]uint64, i uint) bool { return w[i/64]>>(i%64)&1 != 0 }

// anyBelow reports whether any bit of w below position i is set.
func anyBelow(w [3]uint64, i uint) bool {
	for k := uint(0); k < i/64; k++ {
		if w[k] != 0 {
			return true
		}
	}
	return w[i/64]&(1<<(i%64)-1) != 0
}

// Wire form: "BS1", the element count and the terms (uvarints), then per
// element its top as a little-endian int32 and, unless it is noTop, its
// three bins as little-endian int64s, then a special-flags byte per
// element if any element has one (a 1 or 0 byte says whether they follow).

func (s *binSum) marshal() []byte {
	n := 0
	for _, t := range s.top {
		n += 4
		if t != noTop {
			n += 24
		}
	}
	out := make([]byte, 0, 3+2*binary.MaxVarintLen64+n+1+len(s.special))
	out = append(out, "BS1"...)
	out = binary.AppendUvarint(out, uint64(len(s.top)))
	out = binary.AppendUvarint(out, s.terms)
	for i, t := range s.top {
		out = binary.LittleEndian.AppendUint32(out, uint32(t))
		if t != noTop {
			for _, b := range s.bins[3*i : 3*i+3] {
				out = binary.LittleEndian.AppendUint64(out, uint64(b))
			}
		}
	}
	if s.special == nil {
		return append(out, 0)
	}
	out = append(out, 1)
	return append(out, s.special...)
}

// maxTop is the highest bin a float64 term reaches (its leading bit at
// 2^1023: bit 2097 above 2^-1074).
const maxTop = 2097 / 32

func unmarshalBinSum(b []byte) (*binSum, error) {
	if len(b) < 3 || string(b[:3]) != "BS1" {
		return nil, fmt.Errorf("not a float64 sum (%d bytes)", len(b))
	}
	p := 3
	uv := func(what string) (uint64, error) {
		v, k := binary.Uvarint(b[p:])
		var min [binary.MaxVarintLen64]byte
		if k <= 0 || k != binary.PutUvarint(min[:], v) {
			return 0, fmt.Errorf("float64 sum: byte %d: a bad %s", p, what)
		}
		p += k
		return v, nil
	}
	n, err := uv("element count")
	if err != nil {
		return nil, err
	}
	if n > uint64(len(b)-p)/4 {
		return nil, fmt.Errorf("float64 sum: %d elements in %d bytes", n, len(b))
	}
	terms, err := uv("term count")
	if err != nil {
		return nil, err
	}
	if terms > maxTerms {
		return nil, fmt.Errorf("float64 sum: %d terms", terms)
	}
	s := newBinSum(int(n))
	s.terms = terms
	for i := range s.top {
		if len(b)-p < 4 {
			return nil, fmt.Errorf("float64 sum: truncated at element %d", i)
		}
		t := int32(binary.LittleEndian.Uint32(b[p:]))
		p += 4
		if t == noTop {
			continue
		}
		if t < 1 || t > maxTop || len(b)-p < 24 {
			return nil, fmt.Errorf("float64 sum: element %d: top bin %d, or truncated", i, t)
		}
		s.top[i] = t
		for k := 0; k < 3; k++ {
			s.bins[3*i+k] = int64(binary.LittleEndian.Uint64(b[p:]))
			p += 8
		}
	}
	if len(b)-p < 1 {
		return nil, fmt.Errorf("float64 sum: truncated before its flags")
	}
	has := b[p]
	p++
	switch {
	case has == 0 && p == len(b):
		return s, nil
	case has == 1 && len(b)-p == len(s.top):
		s.special = append([]uint8(nil), b[p:]...)
		any := false
		for i, f := range s.special {
			if f&^(specialNaN|specialPosInf|specialNegInf) != 0 {
				return nil, fmt.Errorf("float64 sum: element %d: flags %#x", i, f)
			}
			any = any || f != 0
		}
		if !any {
			return nil, fmt.Errorf("float64 sum: a flags section with no flag set")
		}
		return s, nil
	}
	return nil, fmt.Errorf("float64 sum: %d bytes after the elements", len(b)-p+1)
}

// WireSize is the sum's encoded size (for the runtime's statistics).
func (s *binSum) WireSize() int {
	var v [binary.MaxVarintLen64]byte
	n := 3 + binary.PutUvarint(v[:], uint64(len(s.top))) + binary.PutUvarint(v[:], s.terms) + 1 + len(s.special)
	for _, t := range s.top {
		n += 4
		if t != noTop {
			n += 24
		}
	}
	return n
}
