package oa

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/charmgo/charmgo/chare"
)

// One step of the proxy, in OpenAtom's order (src_charm_driver: GSpace
// drives, the density and the Λ and orthonormalisation passes of the
// PairCalculators follow):
//
//  1. GSpace(s,p) transforms its z-lines to real z and sends each
//     RealSpace(s,z) its lines' values at z (point-to-point transpose).
//  2. RealSpace(s,z) does the 2D FFT to ψ(x,y,z) and section-reduces
//     occ·|ψ|² over the states of plane z into RhoR(z).
//  3. RhoR(z) 2D-FFTs the density and transposes it to RhoG(gx) (point
//     to point); RhoG does the z FFT, applies the Hartree kernel 4π/|g|²,
//     transforms back and transposes to RhoR, which adds the local
//     potential and multicasts V(x,y,z) to the states of plane z.
//  4. RealSpace multiplies ψ by V, FFTs, transposes back; GSpace forms
//     Hψ = ½|g|²ψ + (Vψ)(g).
//  5. The Λ pass: GSpace multicasts ψ (left) and ψ, Hψ (right) to its
//     PairCalc row and column; PairCalc(p,i,j) computes the tiles of ΨᴴΨ
//     and ΨᴴHΨ over its chunk and section-reduces them over the chunks
//     into Ortho(i,j), which checks |ΨᴴΨ − I| and multicasts Λ = ΨᴴHΨ
//     back; PairCalc section-reduces (ΨΛ) over the blocks into each
//     GSpace, which steps ψ ← ψ − dt·(Hψ − ΨΛ).
//  6. The orthonormalisation pass: the same multicasts of the new ψ,
//     S = ΨᴴΨ into Ortho, Newton–Schulz there (block products by row and
//     column multicasts among the Orthos, a max-residual reduction each
//     iteration), T = S^(−1/2) multicast back, Ψ·T section-reduced into
//     GSpace.
//
// The global reductions of the step (energies, norms, the checks) go to
// Main, which checks the invariants.

// Proxies are the arrays, sent to every element once they all exist.
type Proxies struct {
	GS    chare.ArrayProxy[GSpace]
	RS    chare.ArrayProxy[RealSpace]
	RhoR  chare.ArrayProxy[RhoR]
	RhoG  chare.ArrayProxy[RhoG]
	PC    chare.ArrayProxy[PairCalc]
	Ortho chare.ArrayProxy[Ortho]
}

// WireSize is the message's size on the wire.
func (Proxies) WireSize() int { return 24 }

// LinesMsg is one hop of a transpose: the values of a chunk's lines at
// one z (GSpace → RealSpace, and back), or a row of the density's or
// potential's plane (RhoR ↔ RhoG). From is the sender's chunk, plane or
// row.
type LinesMsg struct {
	Step int32
	From int32
	Vals []float64
}

// WireSize is the message's size on the wire.
func (m LinesMsg) WireSize() int { return 8*len(m.Vals) + 8 }

// SectionMsg hands a section's members the section they reduce over.
type SectionMsg[C any] struct{ Sec chare.SectionProxy[C] }

// WireSize is the message's size on the wire.
func (SectionMsg[C]) WireSize() int { return 12 }

// PlaneMsg is the potential of one plane, multicast to its states.
type PlaneMsg struct {
	Step int32
	V    []float64
}

// WireSize is the message's size on the wire.
func (m PlaneMsg) WireSize() int { return 8*len(m.V) + 4 }

// PairMsg is a GSpace's chunk of one state, multicast to its PairCalc row
// (Right false) or column (Right true). HPsi is Hψ on the Λ pass's right
// side. Sec is the sender's column section, over which the result for
// this state is reduced back to it.
type PairMsg struct {
	Seq   int32 // 2·step + pass (0: Λ, 1: orthonormalisation)
	State int32
	Right bool
	Psi   []float64
	HPsi  []float64
	Sec   chare.SectionProxy[PairCalc]
}

// WireSize is the message's size on the wire.
func (m PairMsg) WireSize() int { return 8*(len(m.Psi)+len(m.HPsi)) + 24 }

// XMsg is Λ or T's block, multicast by an Ortho to its PairCalcs.
type XMsg struct {
	Seq int32
	X   []float64
}

// WireSize is the message's size on the wire.
func (m XMsg) WireSize() int { return 8*len(m.X) + 4 }

// NSMsg is one block operand of a Newton–Schulz product, multicast along
// an Ortho row (Row) or column. K is the sender's column (row messages)
// or row (column messages).
type NSMsg struct {
	Seq, Iter, Phase int32
	Row              bool
	K                int32
	M1, M2           []float64
}

// WireSize is the message's size on the wire.
func (m NSMsg) WireSize() int { return 8*(len(m.M1)+len(m.M2)) + 17 }

var (
	MainT      = chare.NewMainTypeOf[Main, Params]("openatom.Main")
	GSpaceT    = chare.NewType[GSpace, Params]("openatom.GSpace")
	RealSpaceT = chare.NewType[RealSpace, Params]("openatom.RealSpace")
	RhoRT      = chare.NewType[RhoR, Params]("openatom.RhoR")
	RhoGT      = chare.NewType[RhoG, Params]("openatom.RhoG")
	PairCalcT  = chare.NewType[PairCalc, Params]("openatom.PairCalc")
	OrthoT     = chare.NewType[Ortho, Params]("openatom.Ortho")

	mainReady    *chare.Entry[Main, struct{}]
	mainGS       *chare.Entry[Main, []float64]
	mainRS       *chare.Entry[Main, []float64]
	mainRhoR     *chare.Entry[Main, []float64]
	mainRhoG     *chare.Entry[Main, []float64]
	mainOrtho    *chare.Entry[Main, []float64]
	mainBoundary *chare.Entry[Main, struct{}]
	mainCkptDone *chare.Entry[Main, struct{}]

	gsSetup    *chare.Entry[GSpace, Proxies]
	gsStart    *chare.Entry[GSpace, struct{}]
	gsBack     *chare.Entry[GSpace, LinesMsg]
	gsBackward *chare.Entry[GSpace, []float64]
	gsResume   *chare.Entry[GSpace, struct{}]

	rsSetup     *chare.Entry[RealSpace, Proxies]
	rsJoin      *chare.Entry[RealSpace, SectionMsg[RealSpace]]
	rsLines     *chare.Entry[RealSpace, LinesMsg]
	rsPotential *chare.Entry[RealSpace, PlaneMsg]

	rhoRSetup   *chare.Entry[RhoR, Proxies]
	rhoRDensity *chare.Entry[RhoR, []float64]
	rhoRRows    *chare.Entry[RhoR, LinesMsg]

	rhoGSetup *chare.Entry[RhoG, Proxies]
	rhoGRows  *chare.Entry[RhoG, LinesMsg]

	pcSetup *chare.Entry[PairCalc, Proxies]
	pcJoin  *chare.Entry[PairCalc, SectionMsg[PairCalc]]
	pcPair  *chare.Entry[PairCalc, PairMsg]
	pcX     *chare.Entry[PairCalc, XMsg]

	orthoSetup    *chare.Entry[Ortho, Proxies]
	orthoTiles    *chare.Entry[Ortho, []float64]
	orthoNS       *chare.Entry[Ortho, NSMsg]
	orthoResidual *chare.Entry[Ortho, []float64]
)

func init() {
	mainReady = chare.NewEntry(MainT, (*Main).Ready)
	mainGS = chare.NewEntry(MainT, (*Main).GSpaceSums)
	mainRS = chare.NewEntry(MainT, (*Main).RealSpaceSums)
	mainRhoR = chare.NewEntry(MainT, (*Main).RhoRSums)
	mainRhoG = chare.NewEntry(MainT, (*Main).RhoGSums)
	mainOrtho = chare.NewEntry(MainT, (*Main).OrthoReport)
	mainBoundary = chare.NewEntry(MainT, (*Main).AtBoundary)
	mainCkptDone = chare.NewEntry(MainT, (*Main).CheckpointDone)
	gsSetup = chare.NewEntry(GSpaceT, (*GSpace).Setup)
	gsStart = chare.NewEntry(GSpaceT, (*GSpace).Start)
	gsBack = chare.NewEntry(GSpaceT, (*GSpace).Back)
	gsBackward = chare.NewEntry(GSpaceT, (*GSpace).Backward)
	gsResume = chare.NewEntry(GSpaceT, (*GSpace).Resume)
	rsSetup = chare.NewEntry(RealSpaceT, (*RealSpace).Setup)
	rsJoin = chare.NewEntry(RealSpaceT, (*RealSpace).JoinDensity)
	rsLines = chare.NewEntry(RealSpaceT, (*RealSpace).Lines)
	rsPotential = chare.NewEntry(RealSpaceT, (*RealSpace).Potential)
	rhoRSetup = chare.NewEntry(RhoRT, (*RhoR).Setup)
	rhoRDensity = chare.NewEntry(RhoRT, (*RhoR).Density)
	rhoRRows = chare.NewEntry(RhoRT, (*RhoR).Rows)
	rhoGSetup = chare.NewEntry(RhoGT, (*RhoG).Setup)
	rhoGRows = chare.NewEntry(RhoGT, (*RhoG).Rows)
	pcSetup = chare.NewEntry(PairCalcT, (*PairCalc).Setup)
	pcJoin = chare.NewEntry(PairCalcT, (*PairCalc).JoinOrtho)
	pcPair = chare.NewEntry(PairCalcT, (*PairCalc).Pair)
	pcX = chare.NewEntry(PairCalcT, (*PairCalc).Apply)
	orthoSetup = chare.NewEntry(OrthoT, (*Ortho).Setup)
	orthoTiles = chare.NewEntry(OrthoT, (*Ortho).Tiles)
	orthoNS = chare.NewEntry(OrthoT, (*Ortho).Operand)
	orthoResidual = chare.NewEntry(OrthoT, (*Ortho).Residual)
}

// The arrays that say they are set up before the first step: six, one
// barrier each.
const setupBarriers = 6

// tagged appends a reduction's tag: contributed by one member only
// (first), so the exact sum is the tag itself.
func tagged(v []float64, first bool, tag int) []float64 {
	if first {
		return append(v, float64(tag))
	}
	return append(v, 0)
}

// untag splits a reduced vector into its values and its tag.
func untag(v []float64) ([]float64, int) {
	return v[:len(v)-1], int(v[len(v)-1])
}

// ---- GSpace ----

// GSpace holds one chunk of one state's plane-wave coefficients.
type GSpace struct {
	P        Params
	Px       Proxies
	Step     int
	Coef     []float64 // c(g), interleaved (re, im), the chunk's points in line order
	HPsi     []float64
	Got      int         // back-transpose messages this step
	BackIn   [][]float64 // by z
	LeftSec  chare.SectionProxy[PairCalc]
	RightSec chare.SectionProxy[PairCalc]
	Seq      int     // the pass whose result it waits for
	tmp      scratch `msgpack:"-"`
}

func (g *GSpace) state(ctx *chare.Ctx) (s, p int) {
	ix := ctx.Index()
	return int(ix.C[0]), int(ix.C[1])
}

// Init sets the chunk's initial coefficients.
func (g *GSpace) Init(ctx *chare.Ctx, p Params) {
	g.P = p
	s, chunk := g.state(ctx)
	geo := g.tmp.geometry(p)
	basis := basisOrder(geo)
	pts := geo.Points()
	g.Coef = make([]float64, 0, 2*geo.ChunkPoints(chunk))
	for _, l := range geo.ChunkLines(chunk) {
		for _, gz := range l.GZ {
			c := initialCoef(p.Seed, s, basis, pts, l.GX, l.GY, gz)
			g.Coef = append(g.Coef, real(c), imag(c))
		}
	}
}

// Setup records the arrays and makes the chunk's PairCalc row (left) and
// column (right) sections.
func (g *GSpace) Setup(ctx *chare.Ctx, px Proxies) {
	g.Px = px
	s, chunk := g.state(ctx)
	b := s / g.P.Grain
	g.LeftSec = px.PC.SectionWhere(ctx, func(ix chare.Index) bool { return int(ix.C[0]) == chunk && int(ix.C[1]) == b })
	g.RightSec = px.PC.SectionWhere(ctx, func(ix chare.Index) bool { return int(ix.C[0]) == chunk && int(ix.C[2]) == b })
	chare.Contribute(ctx, chare.Barrier, struct{}{}, mainReady.CallbackTo(MainT.MainProxy()))
}

// Start orthonormalises the initial states (step 0's second pass).
func (g *GSpace) Start(ctx *chare.Ctx, _ struct{}) {
	g.Step = 0
	g.pairPass(ctx, 1)
}

// forward sends the chunk's lines, transformed to real z, to the
// RealSpace planes of this state.
func (g *GSpace) forward(ctx *chare.Ctx) {
	s, chunk := g.state(ctx)
	if s == 0 && chunk == 0 && !g.P.StepInOrtho {
		chare.AtStep(ctx, g.Step) // failures injected at this step happen now
	}
	n := g.P.Grid
	geo := g.tmp.geometry(g.P)
	lines := geo.ChunkLines(chunk)
	f := g.tmp.ffts(g.P)
	out := make([][]float64, n)
	for z := range out {
		out[z] = make([]float64, 2*len(lines))
	}
	c := cplx(g.Coef)
	at := 0
	for k, l := range lines {
		buf := f.line
		clear(buf)
		for _, gz := range l.GZ {
			buf[wrap(gz, n)] = c[at]
			at++
		}
		f.inverse(buf)
		for z := 0; z < n; z++ {
			out[z][2*k], out[z][2*k+1] = real(buf[z]), imag(buf[z])
		}
	}
	for z := 0; z < n; z++ {
		if g.P.DropTranspose && g.Step == 2 && s == 0 && chunk == 0 && z == 0 {
			continue
		}
		rsLines.Send(ctx, g.Px.RS.At(s, z), LinesMsg{Step: int32(g.Step), From: int32(chunk), Vals: out[z]})
	}
	g.Got, g.BackIn = 0, make([][]float64, n)
}

// Back receives V·ψ's values at one z for the chunk's lines; with every
// plane's it forms Hψ and starts the Λ pass.
func (g *GSpace) Back(ctx *chare.Ctx, m LinesMsg) {
	if int(m.Step) != g.Step || g.BackIn == nil || g.BackIn[m.From] != nil {
		ctx.Fail(fmt.Errorf("GSpace%v: back transpose of step %d from plane %d at step %d", ctx.Index(), m.Step, m.From, g.Step))
		return
	}
	g.BackIn[m.From] = m.Vals
	if g.Got++; g.Got < g.P.Grid {
		return
	}
	s, chunk := g.state(ctx)
	n := g.P.Grid
	geo := g.tmp.geometry(g.P)
	f := g.tmp.ffts(g.P)
	c := cplx(g.Coef)
	g.HPsi = make([]float64, len(g.Coef))
	h := cplx(g.HPsi)
	n3 := float64(n * n * n)
	ns := g.P.States
	// [Ekin, norm by state, ⟨ψ|V|ψ⟩ by state], tagged with the step
	sums := make([]float64, 1+2*ns, 2+2*ns)
	roundTrip := 0.0
	at := 0
	for k, l := range geo.ChunkLines(chunk) {
		buf := f.line
		for z := 0; z < n; z++ {
			buf[z] = complex(g.BackIn[z][2*k], g.BackIn[z][2*k+1])
		}
		f.forward(buf)
		for _, gz := range l.GZ {
			d := buf[wrap(gz, n)] / complex(n3, 0)
			g2 := float64(l.GX*l.GX + l.GY*l.GY + gz*gz)
			h[at] = complex(g2/2, 0)*c[at] + d
			a2 := real(c[at])*real(c[at]) + imag(c[at])*imag(c[at])
			sums[0] += occupation * g2 / 2 * a2
			sums[1+s] += a2
			sums[1+ns+s] += real(c[at])*real(d) + imag(c[at])*imag(d)
			if g.P.UnitPotential {
				roundTrip = max(roundTrip, cmplxAbs(d-c[at]))
			}
			at++
		}
	}
	g.BackIn = nil
	if g.P.UnitPotential && roundTrip > roundTripTol {
		ctx.Fail(InvariantError{Step: g.Step, What: fmt.Sprintf("FFT round trip GS→RS→GS with V ≡ 1: state %d chunk %d off by %.3g (allowed %.0e)", s, chunk, roundTrip, roundTripTol)})
		return
	}
	chare.Contribute(ctx, chare.SumFloat64s, tagged(sums, s == 0 && chunk == 0, g.Step), mainGS.CallbackTo(MainT.MainProxy()))
	g.pairPass(ctx, 0)
}

// pairPass multicasts the chunk to its PairCalc row and column.
func (g *GSpace) pairPass(ctx *chare.Ctx, pass int) {
	s, _ := g.state(ctx)
	g.Seq = 2*g.Step + pass
	left := PairMsg{Seq: int32(g.Seq), State: int32(s), Psi: g.Coef}
	right := PairMsg{Seq: int32(g.Seq), State: int32(s), Right: true, Psi: g.Coef, Sec: g.RightSec}
	if pass == 0 {
		right.HPsi = g.HPsi
	}
	pcPair.Multicast(ctx, g.LeftSec, left)
	pcPair.Multicast(ctx, g.RightSec, right)
}

// Backward receives the pass's result for this state's chunk: ΨΛ on the
// Λ pass (ψ then steps along the projected gradient), ΨT on the
// orthonormalisation pass (the new ψ).
func (g *GSpace) Backward(ctx *chare.Ctx, v []float64) {
	rows, seq := untag(v)
	if seq != g.Seq || len(rows) != len(g.Coef) {
		ctx.Fail(fmt.Errorf("GSpace%v: the result of pass %d (%d values) while waiting for pass %d (%d)", ctx.Index(), seq, len(rows), g.Seq, len(g.Coef)))
		return
	}
	if seq%2 == 0 {
		// new slices, never written in place: the PairCalcs may still
		// hold the ones multicast
		dt := g.P.timeStep()
		next := make([]float64, len(g.Coef))
		for i := range next {
			next[i] = g.Coef[i] - dt*(g.HPsi[i]-rows[i])
		}
		g.Coef = next
		g.HPsi = nil
		g.pairPass(ctx, 1)
		return
	}
	g.Coef = rows // the reduction's result is the chunk's own
	if g.P.lbStep(g.Step) {
		ctx.AtSync()
		return
	}
	g.afterLB(ctx)
}

// ResumeFromSync continues after a load-balancing step.
func (g *GSpace) ResumeFromSync(ctx *chare.Ctx) { g.afterLB(ctx) }

func (g *GSpace) afterLB(ctx *chare.Ctx) {
	if k := g.P.CkptPeriod; k > 0 && g.Step > 0 && g.Step%k == 0 {
		// a checkpoint at this step's end: once every chunk is here and
		// Main has the step's reports, nothing is in flight
		chare.Contribute(ctx, chare.Barrier, struct{}{}, mainBoundary.CallbackTo(MainT.MainProxy()))
		return
	}
	g.Step++
	g.forward(ctx)
}

// Resume starts the next step after a checkpoint (in this run, or in one
// restarted from it).
func (g *GSpace) Resume(ctx *chare.Ctx, _ struct{}) {
	g.Step++
	g.forward(ctx)
}

// ---- RealSpace ----

// RealSpace holds one plane z of one state in real space.
type RealSpace struct {
	P       Params
	Px      Proxies
	Step    int
	Ready   int // Setup and JoinDensity seen
	DensSec chare.SectionProxy[RealSpace]
	Got     int
	Plane   []float64 // ψ̃(x,y) = √Ω ψ, interleaved, kept until V comes
	tmp     scratch   `msgpack:"-"`
}

// Init makes the plane.
func (r *RealSpace) Init(ctx *chare.Ctx, p Params) { r.P, r.Step = p, 1 }

// Setup records the arrays.
func (r *RealSpace) Setup(ctx *chare.Ctx, px Proxies) {
	r.Px = px
	r.ready(ctx)
}

// JoinDensity records the plane's density section.
func (r *RealSpace) JoinDensity(ctx *chare.Ctx, m SectionMsg[RealSpace]) {
	r.DensSec = m.Sec
	r.ready(ctx)
}

func (r *RealSpace) ready(ctx *chare.Ctx) { setUp(ctx, &r.Ready, 2) }

// setUp counts one of the need things an element waits for before the
// first step (the arrays, the section it reduces over); with the last it
// joins its array's barrier to Main.
func setUp(ctx *chare.Ctx, got *int, need int) {
	if *got++; *got == need {
		chare.Contribute(ctx, chare.Barrier, struct{}{}, mainReady.CallbackTo(MainT.MainProxy()))
	}
}

// Lines receives one chunk's line values at this z; with all chunks'
// it transforms the plane and contributes its density.
func (r *RealSpace) Lines(ctx *chare.Ctx, m LinesMsg) {
	n := r.P.Grid
	if int(m.Step) != r.Step {
		ctx.Fail(fmt.Errorf("RealSpace%v: lines of step %d at step %d", ctx.Index(), m.Step, r.Step))
		return
	}
	if r.Got == 0 {
		r.Plane = make([]float64, 2*n*n)
	}
	geo := r.tmp.geometry(r.P)
	a := cplx(r.Plane)
	for k, l := range geo.ChunkLines(int(m.From)) {
		a[wrap(l.GX, n)*n+wrap(l.GY, n)] = complex(m.Vals[2*k], m.Vals[2*k+1])
	}
	if r.Got++; r.Got < r.P.Chunks {
		return
	}
	r.Got = 0
	f := r.tmp.ffts(r.P)
	f.plane2D(a, false)
	ix := ctx.Index()
	rho := chare.Float64s(n * n)
	occ := occupation
	if r.P.BrokenDensity && ix.C[0] == 0 {
		occ /= 2
	}
	for i, v := range a {
		rho[i] = occ * (real(v)*real(v) + imag(v)*imag(v)) / volume
	}
	chare.ContributeSection(ctx, r.DensSec, chare.SumFloat64s, tagged(rho, ix.C[0] == 0, r.Step), rhoRDensity.CallbackTo(r.Px.RhoR.At(int(ix.C[1]))))
}

// Potential receives V on this plane: V·ψ goes back to the state's
// chunks, and the plane's share of the state's norm and ⟨ψ|V|ψ⟩ to Main.
func (r *RealSpace) Potential(ctx *chare.Ctx, m PlaneMsg) {
	n := r.P.Grid
	if int(m.Step) != r.Step || r.Plane == nil {
		ctx.Fail(fmt.Errorf("RealSpace%v: the potential of step %d at step %d", ctx.Index(), m.Step, r.Step))
		return
	}
	ix := ctx.Index()
	s, z := int(ix.C[0]), int(ix.C[1])
	ns := r.P.States
	dv := volume / float64(n*n*n)
	sums := make([]float64, 2*ns, 2*ns+1)
	a := cplx(r.Plane)
	for i, v := range a {
		a2 := (real(v)*real(v) + imag(v)*imag(v)) / volume
		sums[s] += a2 * dv
		sums[ns+s] += m.V[i] * a2 * dv
		a[i] = v * complex(m.V[i], 0)
	}
	chare.Contribute(ctx, chare.SumFloat64s, tagged(sums, s == 0 && z == 0, r.Step), mainRS.CallbackTo(MainT.MainProxy()))
	f := r.tmp.ffts(r.P)
	f.plane2D(a, true)
	geo := r.tmp.geometry(r.P)
	for p := 0; p < r.P.Chunks; p++ {
		lines := geo.ChunkLines(p)
		vals := make([]float64, 2*len(lines))
		for k, l := range lines {
			v := a[wrap(l.GX, n)*n+wrap(l.GY, n)]
			vals[2*k], vals[2*k+1] = real(v), imag(v)
		}
		gsBack.Send(ctx, r.Px.GS.At(s, p), LinesMsg{Step: int32(r.Step), From: int32(z), Vals: vals})
	}
	r.Plane = nil
	if r.P.lbStep(r.Step) {
		ctx.AtSync() // idle until the next step's lines: nothing to resume
	}
	r.Step++
}

// ---- density ----

// RhoR holds plane z of the density and of the potential.
type RhoR struct {
	P     Params
	Px    Proxies
	Sec   chare.SectionProxy[RealSpace] // the states of this plane
	Step  int
	Got   int
	VRows []float64 // the potential's transform, gathered from RhoG
	tmp   scratch   `msgpack:"-"`
}

// Init makes the plane.
func (r *RhoR) Init(ctx *chare.Ctx, p Params) { r.P = p }

// Setup makes the section of this plane's states and tells them.
func (r *RhoR) Setup(ctx *chare.Ctx, px Proxies) {
	r.Px = px
	z := int(ctx.Index().C[0])
	r.Sec = px.RS.SectionWhere(ctx, func(ix chare.Index) bool { return int(ix.C[1]) == z })
	rsJoin.Multicast(ctx, r.Sec, SectionMsg[RealSpace]{Sec: r.Sec})
	chare.Contribute(ctx, chare.Barrier, struct{}{}, mainReady.CallbackTo(MainT.MainProxy()))
}

// Density receives the plane's density, summed over the states.
func (r *RhoR) Density(ctx *chare.Ctx, v []float64) {
	rho, step := untag(v)
	n := r.P.Grid
	z := int(ctx.Index().C[0])
	dv := volume / float64(n*n*n)
	var charge, eloc float64
	a := make([]complex128, n*n)
	for i, x := range rho {
		charge += x * dv
		eloc += localPotential(n, i/n, i%n, z) * x * dv
		a[i] = complex(x, 0)
	}
	chare.Contribute(ctx, chare.SumFloat64s, tagged([]float64{charge, eloc}, z == 0, step), mainRhoR.CallbackTo(MainT.MainProxy()))
	f := r.tmp.ffts(r.P)
	f.plane2D(a, true)
	for j := 0; j < n; j++ {
		row := make([]float64, 2*n)
		copy(cplx(row), a[j*n:(j+1)*n])
		rhoGRows.Send(ctx, r.Px.RhoG.At(j), LinesMsg{Step: int32(step), From: int32(z), Vals: row})
	}
	r.Step, r.Got, r.VRows = step, 0, make([]float64, 2*n*n)
}

// Rows receives the potential's row gx at this plane; with all of them
// it transforms back, adds the local potential and multicasts V.
func (r *RhoR) Rows(ctx *chare.Ctx, m LinesMsg) {
	n := r.P.Grid
	if int(m.Step) != r.Step || r.VRows == nil {
		ctx.Fail(fmt.Errorf("RhoR%v: potential row of step %d at step %d", ctx.Index(), m.Step, r.Step))
		return
	}
	copy(r.VRows[2*n*int(m.From):], m.Vals)
	if r.Got++; r.Got < n {
		return
	}
	a := cplx(r.VRows)
	f := r.tmp.ffts(r.P)
	f.plane2D(a, false)
	z := int(ctx.Index().C[0])
	v := make([]float64, n*n)
	for i := range v {
		if r.P.UnitPotential {
			v[i] = 1
		} else {
			v[i] = real(a[i]) + localPotential(n, i/n, i%n, z)
		}
	}
	r.VRows = nil
	rsPotential.Multicast(ctx, r.Sec, PlaneMsg{Step: int32(r.Step), V: v})
}

// RhoG holds row gx of the density's and potential's transforms.
type RhoG struct {
	P    Params
	Px   Proxies
	Step int
	Got  int
	In   []float64 // by z: the density's row at that plane
	tmp  scratch   `msgpack:"-"`
}

// Init makes the row.
func (r *RhoG) Init(ctx *chare.Ctx, p Params) { r.P = p }

// Setup records the arrays.
func (r *RhoG) Setup(ctx *chare.Ctx, px Proxies) {
	r.Px = px
	chare.Contribute(ctx, chare.Barrier, struct{}{}, mainReady.CallbackTo(MainT.MainProxy()))
}

// Rows receives the density's row gx at one plane; with every plane's it
// solves Poisson's equation along z and sends the potential back.
func (r *RhoG) Rows(ctx *chare.Ctx, m LinesMsg) {
	n := r.P.Grid
	if r.Got == 0 {
		r.Step, r.In = int(m.Step), make([]float64, 2*n*n)
	}
	if int(m.Step) != r.Step {
		ctx.Fail(fmt.Errorf("RhoG%v: density row of step %d at step %d", ctx.Index(), m.Step, r.Step))
		return
	}
	copy(r.In[2*n*int(m.From):], m.Vals)
	if r.Got++; r.Got < n {
		return
	}
	r.Got = 0
	j := int(ctx.Index().C[0])
	gx := signed(j, n)
	in := cplx(r.In) // in[z*n+gy]
	f := r.tmp.ffts(r.P)
	n3 := float64(n * n * n)
	eh := 0.0
	out := make([][]float64, n) // by z: the potential's row
	for z := range out {
		out[z] = make([]float64, 2*n)
	}
	buf := f.line
	for gy := 0; gy < n; gy++ {
		for z := 0; z < n; z++ {
			buf[z] = in[z*n+gy]
		}
		f.forward(buf)
		for k := 0; k < n; k++ {
			rho := buf[k] / complex(n3, 0)
			kern := hartreeKernel(gx, signed(gy, n), signed(k, n))
			eh += volume / 2 * kern * (real(rho)*real(rho) + imag(rho)*imag(rho))
			buf[k] = rho * complex(kern, 0)
		}
		f.inverse(buf)
		for z := 0; z < n; z++ {
			out[z][2*gy], out[z][2*gy+1] = real(buf[z]), imag(buf[z])
		}
	}
	r.In = nil
	chare.Contribute(ctx, chare.SumFloat64s, tagged([]float64{eh}, j == 0, r.Step), mainRhoG.CallbackTo(MainT.MainProxy()))
	for z := 0; z < n; z++ {
		rhoRRows.Send(ctx, r.Px.RhoR.At(z), LinesMsg{Step: int32(r.Step), From: int32(j), Vals: out[z]})
	}
}

// ---- PairCalc ----

// PairCalc(p,i,j) computes the (i,j) tiles of the overlaps over chunk p
// and applies Ortho's blocks to the chunk's states.
type PairCalc struct {
	P        Params
	Px       Proxies
	Ready    int
	OrthoSec chare.SectionProxy[PairCalc] // PairCalc(*,i,j): reduced into Ortho(i,j)
	Seq      int                          // the pass it works on
	Got      int
	Left     [][]float64 // block i's states, by offset in the block
	Right    [][]float64 // block j's
	RightH   [][]float64
	RightSec []chare.SectionProxy[PairCalc] // block j's states' column sections
	Early    []PairMsg                      // of a later pass
}

// Init makes the calculator.
func (c *PairCalc) Init(ctx *chare.Ctx, p Params) {
	c.P, c.Seq = p, 1
	c.reset()
}

func (c *PairCalc) reset() {
	g := c.P.Grain
	c.Got = 0
	c.Left, c.Right, c.RightH = make([][]float64, g), make([][]float64, g), make([][]float64, g)
	c.RightSec = make([]chare.SectionProxy[PairCalc], g)
}

// Setup records the arrays.
func (c *PairCalc) Setup(ctx *chare.Ctx, px Proxies) {
	c.Px = px
	c.ready(ctx)
}

// JoinOrtho records the section reduced into this tile's Ortho.
func (c *PairCalc) JoinOrtho(ctx *chare.Ctx, m SectionMsg[PairCalc]) {
	c.OrthoSec = m.Sec
	c.ready(ctx)
}

func (c *PairCalc) ready(ctx *chare.Ctx) { setUp(ctx, &c.Ready, 2) }

// Pair receives one state's chunk; with the whole row and column it
// computes the tiles and reduces them into Ortho.
func (c *PairCalc) Pair(ctx *chare.Ctx, m PairMsg) {
	if int(m.Seq) > c.Seq {
		c.Early = append(c.Early, m)
		return
	}
	if int(m.Seq) < c.Seq {
		ctx.Fail(fmt.Errorf("PairCalc%v: state %d's chunk of pass %d while at pass %d", ctx.Index(), m.State, m.Seq, c.Seq))
		return
	}
	ix := ctx.Index()
	g := c.P.Grain
	off := int(m.State) % g
	if m.Right {
		c.Right[off], c.RightH[off], c.RightSec[off] = m.Psi, m.HPsi, m.Sec
	} else {
		c.Left[off] = m.Psi
	}
	if c.Got++; c.Got < 2*g {
		return
	}
	npts := len(c.Left[0])
	left := mat.NewDense(g, max(npts, 1), rowsOf(c.Left, npts))
	right := mat.NewDense(g, max(npts, 1), rowsOf(c.Right, npts))
	var tile mat.Dense
	tile.Mul(left, right.T())
	out := append([]float64(nil), tile.RawMatrix().Data...)
	if c.Seq%2 == 0 {
		var lam mat.Dense
		lam.Mul(left, mat.NewDense(g, max(npts, 1), rowsOf(c.RightH, npts)).T())
		out = append(out, lam.RawMatrix().Data...)
	}
	chare.ContributeSection(ctx, c.OrthoSec, chare.SumFloat64s, tagged(out, ix.C[0] == 0, c.Seq),
		orthoTiles.CallbackTo(c.Px.Ortho.At(int(ix.C[1]), int(ix.C[2]))))
}

// rowsOf lays the states' chunks out as the rows of a matrix (a chunk
// without points is a zero column).
func rowsOf(rows [][]float64, npts int) []float64 {
	out := make([]float64, 0, len(rows)*max(npts, 1))
	for _, r := range rows {
		if npts == 0 {
			out = append(out, 0)
			continue
		}
		out = append(out, r...)
	}
	return out
}

// Apply receives Ortho's block X (Λ or T): each state b of block j gets
// Σ_a ψ_a X_ab over block i, reduced over the blocks into its GSpace.
func (c *PairCalc) Apply(ctx *chare.Ctx, m XMsg) {
	if int(m.Seq) != c.Seq || c.Got != 2*c.P.Grain {
		ctx.Fail(fmt.Errorf("PairCalc%v: Ortho's block of pass %d while at pass %d with %d chunks", ctx.Index(), m.Seq, c.Seq, c.Got))
		return
	}
	ix := ctx.Index()
	g := c.P.Grain
	npts := len(c.Left[0])
	var res mat.Dense
	res.Mul(mat.NewDense(g, g, m.X).T(), mat.NewDense(g, max(npts, 1), rowsOf(c.Left, npts)))
	chunk := int(ix.C[0])
	for b := 0; b < g; b++ {
		row := make([]float64, npts, npts+1)
		if npts > 0 {
			copy(row, res.RawRowView(b))
		}
		s := int(ix.C[2])*g + b
		chare.ContributeSection(ctx, c.RightSec[b], chare.SumFloat64s, tagged(row, ix.C[1] == 0, c.Seq),
			gsBackward.CallbackTo(c.Px.GS.At(s, chunk)))
	}
	if c.Seq%2 == 1 && c.P.lbStep(c.Seq/2) {
		ctx.AtSync() // the step's last work here: nothing to resume
	}
	c.Seq++
	c.reset()
	early := c.Early
	c.Early = nil
	for _, e := range early {
		c.Pair(ctx, e)
	}
}

// ---- Ortho ----

// Ortho(i,j) holds block (i,j) of the overlap matrix and runs its part of
// the Newton–Schulz iteration.
type Ortho struct {
	P       Params
	Px      Proxies
	PCSec   chare.SectionProxy[PairCalc]
	RowSec  chare.SectionProxy[Ortho]
	ColSec  chare.SectionProxy[Ortho]
	Seq     int
	A, B, C []float64 // the iteration's Z, Y and 3I − ZY blocks
	Iter    int
	Phase   int // 0: the product ZY; 1: the updates; 2: waiting for the residual
	Got     int
	RowIn   [][2][]float64 // by k: the row operands
	ColIn   [][2][]float64 // by k: the column operands
	Early   []NSMsg
}

// Init makes the block.
func (o *Ortho) Init(ctx *chare.Ctx, p Params) { o.P, o.Seq = p, 1 }

// Setup makes the sections: this block's PairCalcs (told at once), its
// row and its column of Orthos.
func (o *Ortho) Setup(ctx *chare.Ctx, px Proxies) {
	o.Px = px
	ix := ctx.Index()
	i, j := int(ix.C[0]), int(ix.C[1])
	o.PCSec = px.PC.SectionWhere(ctx, func(x chare.Index) bool { return int(x.C[1]) == i && int(x.C[2]) == j })
	o.RowSec = px.Ortho.SectionWhere(ctx, func(x chare.Index) bool { return int(x.C[0]) == i })
	o.ColSec = px.Ortho.SectionWhere(ctx, func(x chare.Index) bool { return int(x.C[1]) == j })
	pcJoin.Multicast(ctx, o.PCSec, SectionMsg[PairCalc]{Sec: o.PCSec})
	chare.Contribute(ctx, chare.Barrier, struct{}{}, mainReady.CallbackTo(MainT.MainProxy()))
}

func (o *Ortho) ij(ctx *chare.Ctx) (int, int) {
	ix := ctx.Index()
	return int(ix.C[0]), int(ix.C[1])
}

// Tiles receives the pass's tiles summed over the chunks.
func (o *Ortho) Tiles(ctx *chare.Ctx, v []float64) {
	tiles, seq := untag(v)
	if seq != o.Seq {
		ctx.Fail(fmt.Errorf("Ortho%v: tiles of pass %d while at pass %d", ctx.Index(), seq, o.Seq))
		return
	}
	g := o.P.Grain
	i, j := o.ij(ctx)
	step := seq / 2
	if seq%2 == 0 {
		// Λ pass: ΨᴴΨ of the states the last orthonormalisation made
		worst := 0.0
		for a := 0; a < g; a++ {
			for b := 0; b < g; b++ {
				want := 0.0
				if i == j && a == b {
					want = 1
				}
				worst = max(worst, math.Abs(tiles[a*g+b]-want))
			}
		}
		if worst > orthoTol {
			ctx.Fail(InvariantError{Step: step, What: fmt.Sprintf("after orthonormalisation |ΨᴴΨ − I|max = %.3g in block (%d,%d) (allowed %.0e)", worst, i, j, orthoTol)})
			return
		}
		chare.Contribute(ctx, chare.MaxFloat64s, []float64{0, float64(step), worst, 0}, mainOrtho.CallbackTo(MainT.MainProxy()))
		if step == o.P.Steps {
			return // the last step ends with the check
		}
		o.Seq++
		pcX.Multicast(ctx, o.PCSec, XMsg{Seq: int32(seq), X: append([]float64(nil), tiles[g*g:]...)})
		return
	}
	// orthonormalisation: Z = I, Y = S
	o.A = make([]float64, g*g)
	if i == j {
		for a := 0; a < g; a++ {
			o.A[a*g+a] = 1
		}
	}
	o.B = append([]float64(nil), tiles...)
	o.Iter = 0
	o.startPhase(ctx, 0)
}

// startPhase sends this block's operands of a phase along its row and
// column: for the product ZY, Z along the row and Y down the column; for
// the updates Y' = YC/2 and Z' = CZ/2, Y and C along the row, C and Z
// down the column.
func (o *Ortho) startPhase(ctx *chare.Ctx, phase int) {
	i, j := o.ij(ctx)
	o.Phase, o.Got = phase, 0
	b := o.P.blocks()
	o.RowIn, o.ColIn = make([][2][]float64, b), make([][2][]float64, b)
	row := NSMsg{Seq: int32(o.Seq), Iter: int32(o.Iter), Phase: int32(phase), Row: true, K: int32(j)}
	col := NSMsg{Seq: int32(o.Seq), Iter: int32(o.Iter), Phase: int32(phase), K: int32(i)}
	if phase == 0 {
		row.M1, col.M1 = o.A, o.B
	} else {
		row.M1, row.M2 = o.B, o.C
		col.M1, col.M2 = o.C, o.A
	}
	orthoNS.Multicast(ctx, o.RowSec, row)
	orthoNS.Multicast(ctx, o.ColSec, col)
	early := o.Early
	o.Early = nil
	for _, e := range early {
		o.Operand(ctx, e)
	}
}

func nsKey(seq, iter, phase int) int { return (seq<<16|iter)<<2 | phase }

// Operand receives a block operand of the current product.
func (o *Ortho) Operand(ctx *chare.Ctx, m NSMsg) {
	cur := nsKey(o.Seq, o.Iter, o.Phase)
	got := nsKey(int(m.Seq), int(m.Iter), int(m.Phase))
	if o.A == nil || o.Phase == 2 || got > cur {
		o.Early = append(o.Early, m) // of a phase still to come
		return
	}
	if got < cur {
		ctx.Fail(fmt.Errorf("Ortho%v: operand of pass %d iteration %d phase %d at iteration %d phase %d", ctx.Index(), m.Seq, m.Iter, m.Phase, o.Iter, o.Phase))
		return
	}
	if m.Row {
		o.RowIn[m.K] = [2][]float64{m.M1, m.M2}
	} else {
		o.ColIn[m.K] = [2][]float64{m.M1, m.M2}
	}
	b := o.P.blocks()
	if o.Got++; o.Got < 2*b {
		return
	}
	g := o.P.Grain
	i, j := o.ij(ctx)
	prod := func(dst *mat.Dense, x, y func(k int) []float64) {
		var t mat.Dense
		for k := 0; k < b; k++ {
			t.Mul(mat.NewDense(g, g, x(k)), mat.NewDense(g, g, y(k)))
			if k == 0 {
				dst.CloneFrom(&t)
			} else {
				dst.Add(dst, &t)
			}
		}
	}
	if o.Phase == 0 {
		var zy mat.Dense
		prod(&zy, func(k int) []float64 { return o.RowIn[k][0] }, func(k int) []float64 { return o.ColIn[k][0] })
		o.C = make([]float64, g*g)
		residual := 0.0
		for a := 0; a < g; a++ {
			for bb := 0; bb < g; bb++ {
				id := 0.0
				if i == j && a == bb {
					id = 1
				}
				x := zy.At(a, bb)
				o.C[a*g+bb] = 3*id - x
				residual = max(residual, math.Abs(x-id))
			}
		}
		o.Phase = 2
		chare.Contribute(ctx, chare.MaxFloat64s, []float64{residual, float64(o.Seq), float64(o.Iter)}, orthoResidual.CallbackBroadcast(o.Px.Ortho))
		return
	}
	var y, z mat.Dense
	prod(&y, func(k int) []float64 { return o.RowIn[k][0] }, func(k int) []float64 { return o.ColIn[k][0] })
	prod(&z, func(k int) []float64 { return o.RowIn[k][1] }, func(k int) []float64 { return o.ColIn[k][1] })
	y.Scale(0.5, &y)
	z.Scale(0.5, &z)
	// fresh blocks: the ones multicast may still be read by the others
	o.B = y.RawMatrix().Data
	if !(o.P.SkipNSUpdate && o.Iter == 0) {
		o.A = z.RawMatrix().Data
	}
	o.Iter++
	o.startPhase(ctx, 0)
}

// Residual receives the iteration's max |ZY − I| over every block.
func (o *Ortho) Residual(ctx *chare.Ctx, v []float64) {
	r, seq, iter := v[0], int(v[1]), int(v[2])
	if seq != o.Seq || iter != o.Iter || o.Phase != 2 {
		ctx.Fail(fmt.Errorf("Ortho%v: residual of pass %d iteration %d at pass %d iteration %d", ctx.Index(), seq, iter, o.Seq, o.Iter))
		return
	}
	step := seq / 2
	if r <= o.P.NSTol {
		chare.Contribute(ctx, chare.MaxFloat64s, []float64{1, float64(step), float64(iter + 1), r}, mainOrtho.CallbackTo(MainT.MainProxy()))
		o.Seq++
		t := o.A
		o.A, o.B, o.C, o.RowIn, o.ColIn = nil, nil, nil, nil, nil
		pcX.Multicast(ctx, o.PCSec, XMsg{Seq: int32(seq), X: t})
		return
	}
	if i, j := o.ij(ctx); o.P.StepInOrtho && step >= 1 && iter == 0 && i == 0 && j == 0 {
		chare.AtStep(ctx, step) // failures injected at this step happen now, mid-iteration
	}
	if iter+1 >= o.P.NSCap {
		ctx.Fail(InvariantError{Step: step, What: fmt.Sprintf("Newton–Schulz did not converge within %d iterations: residual max|ZSZ − I| = %.3g (wanted %.0e)", o.P.NSCap, r, o.P.NSTol)})
		return
	}
	o.startPhase(ctx, 1)
}

// Tolerances of the invariants.
const (
	roundTripTol = 1e-12
	orthoTol     = 1e-10
	parsevalTol  = 1e-11 // relative
	chargeTol    = 1e-11 // relative
)

// InvariantError is a broken invariant: the run stops with it (exit 1).
type InvariantError struct {
	Step int
	What string
}

func (e InvariantError) Error() string {
	return fmt.Sprintf("step %d: invariant broken: %s", e.Step, e.What)
}

func cmplxAbs(c complex128) float64 { return math.Hypot(real(c), imag(c)) }

// scratch is what a chare computes once from its parameters and keeps
// for its life in this process (not its state: a migrated or restored
// chare makes it again): the geometry and the FFT plans. Making them
// per message was 45% of a step.
type scratch struct {
	geo *Geometry
	fft *ffts
}

func (s *scratch) geometry(p Params) *Geometry {
	if s.geo == nil {
		g := NewGeometry(p.Grid, p.Chunks)
		s.geo = &g
	}
	return s.geo
}

func (s *scratch) ffts(p Params) *ffts {
	if s.fft == nil {
		s.fft = newFFTs(p.Grid, p.BrokenFFT)
	}
	return s.fft
}
