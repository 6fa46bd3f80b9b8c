package pe

import "testing"

func BenchmarkRegistryGet(b *testing.B) {
	r := NewRegistry[*int]("thing")
	ids := make([]uint32, 200)
	for i := range ids {
		v := i
		ids[i], _ = r.Add("name-"+itoa(i), &v)
	}
	b.ResetTimer()
	var sink *int
	for i := 0; i < b.N; i++ {
		sink, _ = r.Get(ids[i%len(ids)])
	}
	_ = sink
}
