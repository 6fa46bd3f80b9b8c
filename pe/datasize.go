package pe

import "reflect"

// maxDataDepth bounds how deep DataSize follows pointers and interfaces:
// a payload that points back at itself is sized once round, not for ever.
const maxDataDepth = 16

// DataSize is the size of v's data as msgpack carries it, give or take
// its framing: numbers and booleans at their Go sizes, strings and byte
// slices by their length, slices, arrays and maps by their elements,
// structs by their exported fields, pointers and interfaces by what they
// point at (nil: 0), and a part that implements Sizer by its WireSize.
// It is -1 where v holds a channel, a function or an unsafe pointer,
// which do not cross a process. It walks v each time (a fixed-size
// element type once per slice): payloads sent often implement Sizer.
func DataSize(v reflect.Value) int { return dataSize(v, 0) }

var sizerType = reflect.TypeFor[Sizer]()

func dataSize(v reflect.Value, depth int) int {
	if !v.IsValid() {
		return 0
	}
	t := v.Type()
	if t.NumMethod() > 0 && t.Implements(sizerType) && v.CanInterface() && (v.Kind() != reflect.Pointer || !v.IsNil()) {
		return v.Interface().(Sizer).WireSize()
	}
	switch k := v.Kind(); k {
	case reflect.String:
		return v.Len()
	case reflect.Slice, reflect.Array:
		if n := fixedSize(t.Elem(), 0); n >= 0 {
			return n * v.Len()
		}
		total := 0
		for i := range v.Len() {
			n := dataSize(v.Index(i), depth)
			if n < 0 {
				return -1
			}
			total += n
		}
		return total
	case reflect.Struct:
		if v.CanAddr() && reflect.PointerTo(t).Implements(sizerType) && v.Addr().CanInterface() {
			return v.Addr().Interface().(Sizer).WireSize()
		}
		total := 0
		for i := range v.NumField() {
			f := v.Field(i)
			if !f.CanInterface() {
				continue // unexported: msgpack leaves it out
			}
			n := dataSize(f, depth)
			if n < 0 {
				return -1
			}
			total += n
		}
		return total
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() || depth >= maxDataDepth {
			return 0
		}
		return dataSize(v.Elem(), depth+1)
	case reflect.Map:
		total := 0
		for it := v.MapRange(); it.Next(); {
			k, e := dataSize(it.Key(), depth), dataSize(it.Value(), depth)
			if k < 0 || e < 0 {
				return -1
			}
			total += k + e
		}
		return total
	default:
		return basicSize(k) // -1: a channel, a function, an unsafe pointer
	}
}

// basicSize is the size of a number or a boolean of kind k, or -1.
func basicSize(k reflect.Kind) int {
	switch k {
	case reflect.Bool, reflect.Int8, reflect.Uint8:
		return 1
	case reflect.Int16, reflect.Uint16:
		return 2
	case reflect.Int32, reflect.Uint32, reflect.Float32:
		return 4
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64, reflect.Uintptr, reflect.Float64, reflect.Complex64:
		return 8
	case reflect.Complex128:
		return 16
	}
	return -1
}

// fixedSize is the data size every value of type t has, or -1 when it
// depends on the value (strings, slices, maps, pointers, interfaces,
// Sizers) or t has no size on the wire.
func fixedSize(t reflect.Type, depth int) int {
	if t.NumMethod() > 0 && t.Implements(sizerType) {
		return -1
	}
	switch k := t.Kind(); k {
	case reflect.Array:
		if n := fixedSize(t.Elem(), depth+1); n >= 0 && depth < maxDataDepth {
			return n * t.Len()
		}
	case reflect.Struct:
		if reflect.PointerTo(t).Implements(sizerType) || depth >= maxDataDepth {
			return -1
		}
		total := 0
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			n := fixedSize(f.Type, depth+1)
			if n < 0 {
				return -1
			}
			total += n
		}
		return total
	default:
		return basicSize(k)
	}
	return -1
}
