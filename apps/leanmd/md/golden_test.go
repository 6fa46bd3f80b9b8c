package md

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/charmgo/charmgo/chare"
)

// serialEnergies is an independent reference for LeanMD's physics: the
// box's atoms in one list, and at every step every pair at every periodic
// image within the cutoff summed directly — no cells, computes, stencils,
// image shifts, bounding boxes or reductions — then integrated as LeanMD
// integrates (semi-implicit Euler, velocities clamped). It returns the
// kinetic and potential energies of the first and the last step.
func serialEnergies(dimX, dimY, dimZ, steps int) (ke0, ke1, pe0, pe1 float64) {
	var atoms []Particle
	for x := 0; x < dimX; x++ {
		for y := 0; y < dimY; y++ {
			for z := 0; z < dimZ; z++ {
				atoms = append(atoms, initialParticles(x, y, z, dimX, dimY, dimZ, [2]int{})...)
			}
		}
	}
	box := [3]float64{float64(dimX * CellSizeX), float64(dimY * CellSizeY), float64(dimZ * CellSizeZ)}
	// LJ with q = 1/r² in Å⁻²: the original's constants with its unit
	// conversions (r² × 10⁻²⁰ for the force, × 10⁻¹⁰ for the energy)
	a12, b6 := 12*VdwA*1e130, 6*VdwB*1e70
	ea, eb := VdwA*1e120, VdwB*1e60
	force := make([][3]float64, len(atoms))
	for step := 1; step <= steps; step++ {
		clear(force)
		var pe float64
		for i := range atoms {
			for j := i + 1; j < len(atoms); j++ {
				d := [3]float64{atoms[i].Pos.X - atoms[j].Pos.X, atoms[i].Pos.Y - atoms[j].Pos.Y, atoms[i].Pos.Z - atoms[j].Pos.Z}
				// the images of j within the cutoff, dimension by dimension
				var near [3][5]float64
				var count [3]int
				for k := range d {
					for n := -2.0; n <= 2; n++ {
						if v := d[k] + n*box[k]; math.Abs(v) < PtpCutOff {
							near[k][count[k]] = v
							count[k]++
						}
					}
				}
				for _, dx := range near[0][:count[0]] {
					for _, dy := range near[1][:count[1]] {
						for _, dz := range near[2][:count[2]] {
							r2 := dx*dx + dy*dy + dz*dz
							if r2 <= 1 || r2 >= PtpCutOff*PtpCutOff {
								continue
							}
							q := 1 / r2
							q3 := q * q * q
							s := (a12*q3 - b6) * q3 * q
							force[i][0] += dx * s
							force[i][1] += dy * s
							force[i][2] += dz * s
							force[j][0] -= dx * s
							force[j][1] -= dy * s
							force[j][2] -= dz * s
							pe += ea*q3*q3 - eb*q3
						}
					}
				}
			}
		}
		var ke float64
		for i := range atoms {
			p := &atoms[i]
			v := p.Vel
			ke += 0.5 * p.Mass * (v.X*v.X + v.Y*v.Y + v.Z*v.Z) * 1e10
			const dtVel = Delta * 1e-20
			p.Vel.X = clampVelocity(p.Vel.X + force[i][0]/p.Mass*dtVel)
			p.Vel.Y = clampVelocity(p.Vel.Y + force[i][1]/p.Mass*dtVel)
			p.Vel.Z = clampVelocity(p.Vel.Z + force[i][2]/p.Mass*dtVel)
			p.Pos.X += p.Vel.X * Delta
			p.Pos.Y += p.Vel.Y * Delta
			p.Pos.Z += p.Vel.Z * Delta
		}
		if step == 1 {
			ke0, pe0 = ke, pe
		}
		if step == steps {
			ke1, pe1 = ke, pe
		}
	}
	return ke0, ke1, pe0, pe1
}

// LeanMD's energies on 2³ and 3³ boxes, 21 steps (past a migration and
// a balancing step), as this tree computes them, to the bit, on every PE
// count; and within 1e-10 (relative) of the serial reference, whose sums
// run in another order. A faster kernel that changes the rounding fails
// the first check: say by how much (the second) and why that is
// acceptable, then record the new bits.
func TestGoldenEnergies(t *testing.T) {
	golden := []struct {
		x, y, z, steps     int
		ke0, ke1, pe0, pe1 uint64 // math.Float64bits
	}{
		{2, 2, 2, 21, 0x3cd3afe6b10b24e7, 0x3cd20d8d7b83b94e, 0xbcc876aab20ce24f, 0xbcc503d713309701},
		{3, 3, 3, 21, 0x3cf14ede32713535, 0x3cef98f0d0d29db0, 0xbce5df222f3b7d9e, 0xbce2af8007432d61},
	}
	for _, g := range golden {
		t.Run(fmt.Sprintf("%dx%dx%d", g.x, g.y, g.z), func(t *testing.T) {
			if raceOn {
				t.Skip("physics, not concurrency: the plain tier runs it")
			}
			want := []uint64{g.ke0, g.ke1, g.pe0, g.pe1}
			check := func(pes int, kernel string) {
				p := params(g.x, g.y, g.z, g.steps)
				p.Kernel = kernel
				r := run(t, p, chare.Config{PEs: pes})
				got := []uint64{math.Float64bits(r.KE0), math.Float64bits(r.KE1), math.Float64bits(r.PE0), math.Float64bits(r.PE1)}
				require.Equal(t, want, got, "%d PEs, kernel %q: KE0 %v KE1 %v PE0 %v PE1 %v", pes, kernel, r.KE0, r.KE1, r.PE0, r.PE1)
			}
			for _, pes := range []int{1, 2, 3, 4} {
				check(pes, "") // the widest kernel this CPU runs
			}
			// every other kernel this build and CPU run, through the whole program
			for _, kernel := range []string{"scalar", "avx2", "avx512"} {
				if lanes, err := kernelLanes(kernel); err == nil && lanes != vectorLanes() {
					check(2, kernel)
				}
			}
			ke0, ke1, pe0, pe1 := serialEnergies(g.x, g.y, g.z, g.steps)
			for i, ref := range []float64{ke0, ke1, pe0, pe1} {
				got := math.Float64frombits(want[i])
				require.InEpsilon(t, ref, got, 1e-10, "energy %d (KE0, KE1, PE0, PE1): serial %v, LeanMD %v", i, ref, got)
				t.Logf("energy %d: LeanMD %v, serial %v: relative difference %.1e", i, got, ref, math.Abs(got-ref)/math.Abs(ref))
			}
		})
	}
}
