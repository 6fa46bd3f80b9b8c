package oa

import (
	"errors"
	"fmt"
	"io"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/charmgo/charmgo/chare"
)

func tiny(states, grid, steps, chunks, grain int) Params {
	p := DefaultParams()
	p.States, p.Grid, p.Steps, p.Chunks, p.Grain = states, grid, steps, chunks, grain
	return p
}

func run(t *testing.T, p Params, cfg chare.Config) Report {
	t.Helper()
	r, err := Run(p, cfg, io.Discard)
	require.NoError(t, err)
	require.Len(t, r.Energies, p.Steps)
	return r
}

// ---- the serial reference: no chares, no FFTs ----

// reference runs the same model serially with direct sums in g-space:
// the density's Fourier coefficients by convolution of the states'
// coefficients, the potential applied by convolution, Λ and the overlaps
// as dense products, and Löwdin's S^(−1/2) from an eigendecomposition
// instead of Newton–Schulz. Only the initial states (initialCoef, the
// model's input) are shared with the proxy.
func reference(p Params, steps int) []StepEnergies {
	n := p.Grid
	r2 := (n / 4) * (n / 4)
	type vec [3]int
	var pts []vec
	where := map[vec]int{}
	for gx := -n / 2; gx < n/2; gx++ {
		for gy := -n / 2; gy < n/2; gy++ {
			for gz := -n / 2; gz < n/2; gz++ {
				if gx*gx+gy*gy+gz*gz < r2 {
					where[vec{gx, gy, gz}] = len(pts)
					pts = append(pts, vec{gx, gy, gz})
				}
			}
		}
	}
	geo := NewGeometry(n, 1)
	basis := basisOrder(&geo)
	ns, np := p.States, len(pts)
	c := make([][]complex128, ns)
	for s := range c {
		c[s] = make([]complex128, np)
		for i, g := range pts {
			c[s][i] = initialCoef(p.Seed, s, basis, geo.Points(), g[0], g[1], g[2])
		}
	}
	overlap := func(a, b [][]complex128) *mat.Dense {
		m := mat.NewDense(ns, ns, nil)
		for s := 0; s < ns; s++ {
			for t := 0; t < ns; t++ {
				v := 0.0
				for i := 0; i < np; i++ {
					v += real(a[s][i])*real(b[t][i]) + imag(a[s][i])*imag(b[t][i])
				}
				m.Set(s, t, v)
			}
		}
		return m
	}
	combine := func(x *mat.Dense) [][]complex128 { // (Ψ·X)_t = Σ_s ψ_s X_st
		out := make([][]complex128, ns)
		for t := range out {
			out[t] = make([]complex128, np)
			for s := 0; s < ns; s++ {
				for i := range out[t] {
					out[t][i] += c[s][i] * complex(x.At(s, t), 0)
				}
			}
		}
		return out
	}
	lowdin := func() {
		var eig mat.EigenSym
		if !eig.Factorize(mat.NewSymDense(ns, overlap(c, c).RawMatrix().Data), true) {
			panic("eigendecomposition failed")
		}
		var v mat.Dense
		eig.VectorsTo(&v)
		vals := eig.Values(nil)
		d := mat.NewDense(ns, ns, nil)
		for i, l := range vals {
			d.Set(i, i, 1/math.Sqrt(l))
		}
		var t mat.Dense
		t.Product(&v, d, v.T())
		c = combine(&t)
	}
	lowdin()
	var out []StepEnergies
	for k := 1; k <= steps; k++ {
		// ρ̃(q) = (occ/Ω) Σ_s Σ_g c*(g) c(g+q)
		rho := map[vec]complex128{}
		for s := 0; s < ns; s++ {
			for i, g := range pts {
				for j, h := range pts {
					q := vec{h[0] - g[0], h[1] - g[1], h[2] - g[2]}
					rho[q] += occupation / volume * complex(real(c[s][i]), -imag(c[s][i])) * c[s][j]
				}
			}
		}
		var e StepEnergies
		pot := map[vec]complex128{} // V̂(q): Hartree plus local
		for q, v := range rho {
			kern := hartreeKernel(q[0], q[1], q[2])
			e.Hartree += volume / 2 * kern * (real(v)*real(v) + imag(v)*imag(v))
			pot[q] = complex(kern, 0) * v
		}
		for _, q := range []vec{{1, 0, 0}, {-1, 0, 0}, {0, 1, 0}, {0, -1, 0}, {0, 0, 1}, {0, 0, -1}} {
			pot[q] += complex(-localStrength/2, 0)
			e.Local += volume * (-localStrength / 2) * real(rho[vec{-q[0], -q[1], -q[2]}])
		}
		hc := make([][]complex128, ns)
		for s := 0; s < ns; s++ {
			hc[s] = make([]complex128, np)
			for i, g := range pts {
				g2 := float64(g[0]*g[0] + g[1]*g[1] + g[2]*g[2])
				a := c[s][i]
				e.Kinetic += occupation * g2 / 2 * (real(a)*real(a) + imag(a)*imag(a))
				hc[s][i] += complex(g2/2, 0) * a
				for j, h := range pts { // (Vψ)(g) = Σ_h V̂(g−h) c(h)
					hc[s][i] += pot[vec{g[0] - h[0], g[1] - h[1], g[2] - h[2]}] * c[s][j]
				}
			}
		}
		e.Total = e.Kinetic + e.Hartree + e.Local
		out = append(out, e)
		if k == steps {
			break
		}
		lam := overlap(c, hc)
		pl := combine(lam)
		dt := p.timeStep()
		for s := range c {
			for i := range c[s] {
				c[s][i] -= complex(dt, 0) * (hc[s][i] - pl[s][i])
			}
		}
		lowdin()
	}
	return out
}

// The proxy's energies, step by step, are the serial reference's: 4
// states in one PairCalc block, and 8 in 2×2 blocks (so Newton–Schulz
// runs on a distributed matrix), chunks of unequal sizes.
func TestTheSerialReferenceGivesTheSameEnergies(t *testing.T) {
	for _, p := range []Params{tiny(4, 8, 4, 3, 4), tiny(8, 8, 3, 4, 4), tiny(6, 12, 3, 5, 2)} {
		t.Run(fmt.Sprintf("%d states %d³ grain %d", p.States, p.Grid, p.Grain), func(t *testing.T) {
			want := reference(p, p.Steps)
			got := run(t, p, chare.Config{PEs: 2}).Energies
			for k := range want {
				for _, v := range []struct {
					name      string
					want, got float64
				}{
					{"kinetic", want[k].Kinetic, got[k].Kinetic}, {"Hartree", want[k].Hartree, got[k].Hartree},
					{"local", want[k].Local, got[k].Local}, {"total", want[k].Total, got[k].Total},
				} {
					require.InDelta(t, v.want, v.got, 1e-10*(1+math.Abs(v.want)), "step %d %s energy", k+1, v.name)
				}
			}
			require.Less(t, got[p.Steps-1].Total, got[0].Total, "steepest descent lowers the energy")
		})
	}
}

// Same seed, same bits: on 1 to 4 PEs, with the wire check, with the
// transport reordering messages.
func TestSameEnergiesOnAnyPECount(t *testing.T) {
	p := tiny(8, 8, 4, 3, 4)
	base := run(t, p, chare.Config{PEs: 1})
	for _, cfg := range []chare.Config{{PEs: 2}, {PEs: 3, WireCheck: true}, {PEs: 4, TransportChaos: 7}} {
		t.Run(fmt.Sprintf("%d PEs wire %v chaos %d", cfg.PEs, cfg.WireCheck, cfg.TransportChaos), func(t *testing.T) {
			require.Equal(t, base.Energies, run(t, p, cfg).Energies)
		})
	}
	other := p
	other.Seed = 2
	require.NotEqual(t, base.Energies[0].Total, run(t, other, chare.Config{PEs: 2}).Energies[0].Total, "the seed chooses the states")
}

// Each invariant fails on a kernel broken on purpose, with one line that
// says which and at which step.
func TestEachInvariantCatchesABrokenKernel(t *testing.T) {
	cases := []struct {
		name  string
		broke func(*Params)
		want  string
	}{
		{"wrong twiddle", func(p *Params) { p.BrokenFFT = true }, "step 1: invariant broken: Parseval: state 0"},
		{"wrong twiddle, V ≡ 1", func(p *Params) { p.BrokenFFT, p.UnitPotential = true, true }, "step 1: invariant broken: FFT round trip GS→RS→GS with V ≡ 1"},
		{"density misses charge", func(p *Params) { p.BrokenDensity = true }, "step 1: invariant broken: total charge"},
		{"Newton–Schulz step skipped", func(p *Params) { p.SkipNSUpdate = true }, "invariant broken: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := tiny(8, 8, 3, 3, 4)
			c.broke(&p)
			_, err := Run(p, chare.Config{PEs: 2}, io.Discard)
			require.Error(t, err)
			var inv InvariantError
			require.True(t, errors.As(err, &inv), "%v", err)
			require.Contains(t, err.Error(), c.want)
		})
	}
	t.Run("V ≡ 1 round trip holds", func(t *testing.T) {
		p := tiny(8, 8, 2, 3, 4)
		p.UnitPotential = true
		run(t, p, chare.Config{PEs: 2})
	})
	t.Run("dropped transpose message", func(t *testing.T) {
		p := tiny(8, 8, 3, 3, 4)
		p.DropTranspose = true
		_, err := Run(p, chare.Config{PEs: 2}, io.Discard)
		require.Error(t, err)
		require.Contains(t, err.Error(), "went quiet")
	})
}

// What the run asks of the runtime equals the formulas, on any PE count.
func TestCountsEqualTheFormulas(t *testing.T) {
	for _, c := range []struct {
		p   Params
		pes int
	}{{tiny(8, 8, 3, 3, 4), 1}, {tiny(8, 8, 3, 3, 4), 3}, {tiny(6, 12, 2, 5, 2), 2}, {tiny(4, 8, 1, 2, 4), 2}} {
		t.Run(fmt.Sprintf("%d states grain %d %d steps %d PEs", c.p.States, c.p.Grain, c.p.Steps, c.pes), func(t *testing.T) {
			r := run(t, c.p, chare.Config{PEs: c.pes})
			iters := []int{r.InitialNSIters}
			for _, e := range r.Energies[:len(r.Energies)-1] {
				iters = append(iters, e.NSIters)
			}
			want := RunCounts(c.p, iters)
			o := r.Ops.Ops
			got := Counts{P2P: o.P2P, Multicasts: o.Multicasts, Deliveries: o.Deliveries, Contributions: o.Contributions, Broadcasts: o.Broadcasts}
			require.Equal(t, want, got)
		})
	}
}

// Bad parameters are refused before the run, each naming what to change.
func TestBadParametersAreRefused(t *testing.T) {
	cases := []struct {
		change func(*Params)
		want   string
	}{
		{func(p *Params) { p.Grid = 9 }, "grid 9: must be even"},
		{func(p *Params) { p.Grid = 40 }, "grid 40: out of range"},
		{func(p *Params) { p.Grain = 3 }, "--grain 3: must divide the 32 states"},
		{func(p *Params) { p.Chunks = 1000 }, "--chunks 1000: want 1 to"},
		{func(p *Params) { p.States, p.Grid, p.Grain = 64, 8, 8 }, "64 states on a 8³ grid: its sphere holds 27 plane waves"},
		{func(p *Params) { p.MaxMemory = 1 << 20 }, "need about"},
	}
	for _, c := range cases {
		p := DefaultParams()
		c.change(&p)
		_, err := Run(p, chare.Config{PEs: 1}, io.Discard)
		require.Error(t, err)
		require.True(t, errors.As(err, new(chare.InputError)))
		require.Contains(t, err.Error(), c.want)
	}
	var p Params
	require.ErrorContains(t, ParseArgs([]string{"8", "x"}, &p), `argument grid: "x" is not a whole number`)
	require.ErrorContains(t, ParseArgs([]string{"200"}, &p), "argument states: 200 is out of range (want 1 to 128)")
	require.ErrorContains(t, ParseArgs([]string{"1", "8", "1", "4"}, &p), "too many arguments")
}
