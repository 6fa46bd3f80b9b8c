package oa

// Counts are what a run asks of the runtime, by kind: point-to-point
// sends (reduction results to one element included), multicasts and the
// deliveries they make, reduction contributions, broadcasts. They follow
// from the parameters and the Newton–Schulz iteration counts alone,
// whatever the PE count (README: the formulas).
type Counts struct {
	P2P, Multicasts, Deliveries, Contributions, Broadcasts uint64
}

func (c *Counts) add(o Counts) {
	c.P2P += o.P2P
	c.Multicasts += o.Multicasts
	c.Deliveries += o.Deliveries
	c.Contributions += o.Contributions
	c.Broadcasts += o.Broadcasts
}

// SetupCounts is the traffic before step 0: the arrays' Setup and Start
// broadcasts, the density and Ortho sections' joins, one barrier per
// array.
func SetupCounts(p Params) Counts {
	ns, n, gc, b := u(p.States), u(p.Grid), u(p.Chunks), u(p.blocks())
	return Counts{
		Broadcasts:    setupBarriers + 1,
		Multicasts:    n + b*b,
		Deliveries:    ns*n + gc*b*b,
		Contributions: ns*gc + ns*n + n + n + gc*b*b + b*b,
		P2P:           setupBarriers,
	}
}

// OrthoPassCounts is one orthonormalisation pass that took iters
// Newton–Schulz iterations: GSpace's row and column multicasts, the
// tiles reduced into Ortho, per iteration the product's operands along
// rows and columns, the residual's reduction and broadcast and (but the
// last) the updates' operands, then T multicast back, Ψ·T reduced into
// GSpace, and the iteration count to Main.
func OrthoPassCounts(p Params, iters int) Counts {
	b, it := u(p.blocks()), u(iters)
	c := pairPassCounts(p, true)
	c.add(Counts{
		Multicasts:    2*b*b*it + 2*b*b*(it-1),
		Deliveries:    2*b*b*b*it + 2*b*b*b*(it-1),
		Contributions: b*b*it + b*b,
		Broadcasts:    it,
		P2P:           1,
	})
	return c
}

// pairPassCounts is a PairCalc pass without Newton–Schulz: GSpace's two
// multicasts, the tiles into Ortho, and (applied) Ortho's block back and
// the per-state reductions into GSpace.
func pairPassCounts(p Params, applied bool) Counts {
	ns, gc, b := u(p.States), u(p.Chunks), u(p.blocks())
	c := Counts{
		Multicasts:    2 * ns * gc,
		Deliveries:    2 * ns * gc * b,
		Contributions: gc * b * b,
		P2P:           b * b,
	}
	if applied {
		c.add(Counts{Multicasts: b * b, Deliveries: gc * b * b, Contributions: gc * b * ns, P2P: ns * gc})
	}
	return c
}

// StepCounts is step k of a run of p.Steps steps (without its
// orthonormalisation, OrthoPassCounts): the transposes both ways, the
// density's reductions, the RhoR/RhoG transposes, the potential's
// multicasts, the reductions to Main and the Λ pass (applied but on the
// last step).
func StepCounts(p Params, k int) Counts {
	ns, n, gc, b := u(p.States), u(p.Grid), u(p.Chunks), u(p.blocks())
	c := Counts{
		P2P:           2*ns*gc*n + 2*n*n + n + 5,
		Multicasts:    n,
		Deliveries:    ns * n,
		Contributions: ns*n + ns*gc + ns*n + n + n + b*b,
	}
	c.add(pairPassCounts(p, k < p.Steps))
	return c
}

// RunCounts is a whole run's traffic given the iteration count of every
// orthonormalisation (steps 0 to Steps−1).
func RunCounts(p Params, iters []int) Counts {
	c := SetupCounts(p)
	for k, it := range iters {
		c.add(OrthoPassCounts(p, it))
		c.add(StepCounts(p, k+1))
	}
	return c
}

func u(v int) uint64 { return uint64(v) }
