//go:build !amd64 || purego

package md

// Off amd64 (or with the purego tag) there is no vector kernel: the scalar
// one runs (kernel_amd64.go has the vector kernel and says why it gives
// the same bits).

func (k *kernel) pairForcesVec(a, b []Vec3, shift Vec3, fa, fb []Vec3) (float64, bool) {
	return 0, false
}

func (k *kernel) selfForcesVec(pos []Vec3, f []Vec3) (float64, bool) { return 0, false }

func vectorWidths() []int { return nil }

func vectorLanes() int { return 0 }

// kernelKind names the kernel of lanes lanes, for the run's summary.
func kernelKind(lanes int) string { return "scalar" }
