package bench

import (
	"fmt"
	"io"
	"testing"

	"github.com/charmgo/charmgo/apps/leanmd/md"
	"github.com/charmgo/charmgo/chare"
)

// BenchmarkLeanMDKernel is the force kernel alone over every compute of a
// 3×3×3 step: ns per pair evaluation (distance tests beyond the cutoff
// included, the C++ LeanMD's measure). Scalar is the kernel that runs
// where the CPU has no AVX-512, the vector kernel's baseline in the same
// run.
func BenchmarkLeanMDKernel(b *testing.B) { benchmarkKernel(b, (*md.StepWorkload).Run) }

func BenchmarkLeanMDKernelScalar(b *testing.B) { benchmarkKernel(b, (*md.StepWorkload).RunScalar) }

func benchmarkKernel(b *testing.B, run func(*md.StepWorkload)) {
	w := md.NewStepWorkload(3, 3, 3)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run(w)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(w.Pairs), "ns/pair")
}

// BenchmarkLeanMD runs 100 steps (as the reference figures do) and reports
// the median ms/step and the force kernel's share of the PEs' time. Run it
// with -benchtime 1x.
func BenchmarkLeanMD(b *testing.B) {
	for _, box := range [][3]int{{3, 3, 3}, {4, 4, 4}} {
		for _, pes := range []int{1, 2} {
			b.Run(fmt.Sprintf("%dx%dx%d/p%d", box[0], box[1], box[2], pes), func(b *testing.B) {
				p := md.DefaultParams()
				p.X, p.Y, p.Z, p.Steps = box[0], box[1], box[2], 100
				var ms, share float64
				for i := 0; i < b.N; i++ {
					r, err := md.Run(p, chare.Config{PEs: pes, Balancer: "rotate"}, io.Discard)
					if err != nil || !r.EnergyOK {
						b.Fatal(err, r.RelDrift)
					}
					ms += r.MedianStepMs()
					share += r.KernelShare()
				}
				b.ReportMetric(ms/float64(b.N), "ms/step")
				b.ReportMetric(100*share/float64(b.N), "kernel%")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
