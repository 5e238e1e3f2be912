package registry_test

import (
	"fmt"
	"testing"
)

// BenchmarkBuildParallel measures a look-up plus a trivial factory from many
// goroutines at once, with 100 names registered: the registry's hot path.
func BenchmarkBuildParallel(b *testing.B) {
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("cloud-%d", i)
	}
	r := newRegistry(b, names...)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := r.Build(names[i%len(names)], nil); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}
