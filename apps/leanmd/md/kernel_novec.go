//go:build !(goexperiment.simd && amd64)

package md

// Without GOEXPERIMENT=simd on amd64 there is no vector kernel: the scalar
// one runs (kernel_simd_amd64.go has the vector kernels and says why they
// give the same bits).

func (k *kernel) pairForcesVec(a, b []Vec3, shift Vec3, fa, fb []Vec3) (float64, bool) {
	return 0, false
}

func (k *kernel) selfForcesVec(pos []Vec3, f []Vec3) (float64, bool) { return 0, false }

// kernelKind says which force kernel runs, for the run's summary.
func kernelKind() string { return "scalar; GOEXPERIMENT=simd builds the vector kernel" }
