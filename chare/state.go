package chare

import (
	"encoding"
	"fmt"
	"reflect"

	"github.com/vmihailenco/msgpack/v5"
)

// checkState reports a field of chare type t (its state) that msgpack of
// the type would not bring back whole after a migration, a checkpoint or
// a restart: an unexported field (msgpack drops it), a channel, function,
// unsafe pointer or complex number (msgpack refuses them), or an
// interface (msgpack brings back a map or a number, not the type it
// held); in the type itself or any type it holds. A field tagged
// msgpack:"-" is left out on purpose; a type that encodes itself
// (Migratable at the top; msgpack.CustomEncoder and CustomDecoder,
// msgpack.Marshaler and Unmarshaler, encoding.BinaryMarshaler and
// BinaryUnmarshaler inside) is taken at its word.
func checkState(t reflect.Type) error {
	if reflect.PointerTo(t).Implements(reflect.TypeFor[Migratable]()) {
		return nil
	}
	return walkState(t, t.Name(), map[reflect.Type]bool{})
}

var selfCoding = [][2]reflect.Type{
	{reflect.TypeFor[msgpack.CustomEncoder](), reflect.TypeFor[msgpack.CustomDecoder]()},
	{reflect.TypeFor[msgpack.Marshaler](), reflect.TypeFor[msgpack.Unmarshaler]()},
	{reflect.TypeFor[encoding.BinaryMarshaler](), reflect.TypeFor[encoding.BinaryUnmarshaler]()},
}

func walkState(t reflect.Type, path string, seen map[reflect.Type]bool) error {
	if seen[t] {
		return nil
	}
	seen[t] = true
	for _, c := range selfCoding {
		if (t.Implements(c[0]) || reflect.PointerTo(t).Implements(c[0])) && reflect.PointerTo(t).Implements(c[1]) {
			return nil
		}
	}
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.UnsafePointer, reflect.Complex64, reflect.Complex128:
		return fmt.Errorf("%s is a %v: msgpack cannot encode it", path, t.Kind())
	case reflect.Interface:
		return fmt.Errorf("%s is an interface (%v): msgpack would bring it back as a map or a number, not the type it held", path, t)
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return walkState(t.Elem(), path+elemPath(t.Kind()), seen)
	case reflect.Map:
		if err := walkState(t.Key(), path+" key", seen); err != nil {
			return err
		}
		return walkState(t.Elem(), path+"[…]", seen)
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if f.Name == "_" || f.Tag.Get("msgpack") == "-" {
				continue
			}
			if !f.IsExported() && !f.Anonymous {
				return fmt.Errorf("%s.%s is unexported: msgpack drops it", path, f.Name)
			}
			if err := walkState(f.Type, path+"."+f.Name, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

func elemPath(k reflect.Kind) string {
	if k == reflect.Pointer {
		return ""
	}
	return "[…]"
}
