package oa

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"time"

	"github.com/charmgo/charmgo/chare"
	"github.com/charmgo/charmgo/internal/stat"
)

// StepEnergies are one step's energies (of the states at the start of
// the step, orthonormal) and checks.
type StepEnergies struct {
	Kinetic, Hartree, Local, Total float64
	// OrthoError is max |ΨᴴΨ − I| of the states, measured by the Λ pass;
	// NSIters and NSResidual are the orthonormalisation that follows
	// (none after the last step).
	OrthoError float64
	NSIters    int
	NSResidual float64
}

// stepSums gathers a step's global reductions at Main until all came.
type stepSums struct {
	G, R, RhoR, RhoG []float64
	Checked, NS      bool
	E                StepEnergies
}

// Main is the proxy's main chare: it makes the arrays, starts the run,
// checks every step's invariants from its reductions and reports.
type Main struct {
	P     Params
	Px    Proxies
	SetUp int        // arrays that said they are set up
	Steps []stepSums // by step (0: the initial orthonormalisation)
	Done  int        // steps checked
	Over  bool       // the last step was checked: the run is over
	// Boundary is the step at whose end every GSpace waits for a
	// checkpoint (0: none); it is taken once Main checked that step.
	Boundary int
	LastCkpt int // the step at whose end the last checkpoint was taken
	// this process's own: a restart's clock starts again
	start  time.Time `msgpack:"-"`
	last   time.Time `msgpack:"-"`
	stepMs []float64 `msgpack:"-"`
	report Report    `msgpack:"-"`
}

// planeMajor places RealSpace plane-major: the linear index z·States + s
// in blocks, so the states of a plane share a PE as far as the PE count
// allows and RhoR(z), block-mapped, is with them — the density's
// reductions and the potential's multicasts stay mostly within a PE,
// and the transposes, state-major on the GSpace side, cross PEs (as in
// OpenAtom, whose real-space map keeps a plane's states together for
// the density and spreads a state's planes).
var planeMajor = chare.RegisterMap("openatom.planes", func(ix chare.Index, bounds []int, n int) int {
	states, planes := int64(bounds[0]), int64(bounds[1])
	lin := int64(ix.C[1])*states + int64(ix.C[0])
	return int(lin * int64(n) / (states * planes))
})

// Init makes the arrays and sends each the others.
func (m *Main) Init(ctx *chare.Ctx, p Params) {
	if steps, _ := chare.CheckpointPeriod(ctx); steps > 0 { // a period in time is refused by Run
		p.CkptPeriod = steps
	}
	m.P = p
	last := p.Steps
	if p.StepInOrtho {
		last-- // the last step has no orthonormalisation
	}
	if !chare.StepRange(ctx, 1, last) {
		return
	}
	b := p.blocks()
	m.Steps = make([]stepSums, p.Steps+1)
	m.Px = Proxies{
		RS:    RealSpaceT.NewArray(ctx, []int{p.States, p.Grid}, p, planeMajor),
		RhoR:  RhoRT.NewArray(ctx, []int{p.Grid}, p),
		RhoG:  RhoGT.NewArray(ctx, []int{p.Grid}, p),
		PC:    PairCalcT.NewArray(ctx, []int{p.Chunks, b, b}, p),
		Ortho: OrthoT.NewArray(ctx, []int{b, b}, p),
		GS:    GSpaceT.NewArray(ctx, []int{p.States, p.Chunks}, p),
	}
	rsSetup.Broadcast(ctx, m.Px.RS, m.Px)
	rhoRSetup.Broadcast(ctx, m.Px.RhoR, m.Px)
	rhoGSetup.Broadcast(ctx, m.Px.RhoG, m.Px)
	pcSetup.Broadcast(ctx, m.Px.PC, m.Px)
	orthoSetup.Broadcast(ctx, m.Px.Ortho, m.Px)
	gsSetup.Broadcast(ctx, m.Px.GS, m.Px)
	geo := NewGeometry(p.Grid, p.Chunks)
	printf(ctx, "OpenAtom proxy: %d states, %d³ grid (%d plane waves a state on %d z-lines), %d steps\n",
		p.States, p.Grid, geo.Points(), len(geo.Lines), p.Steps)
	printf(ctx, "arrays: GSpace %dx%d, RealSpace %dx%d, RhoR %d, RhoG %d, PairCalc %dx%dx%d (grain %d), Ortho %dx%d\n",
		p.States, p.Chunks, p.States, p.Grid, p.Grid, p.Grid, p.Chunks, b, b, p.Grain, b, b)
}

// Ready counts the arrays that are set up; with all of them the run
// starts.
func (m *Main) Ready(ctx *chare.Ctx, _ struct{}) {
	if m.SetUp++; m.SetUp < setupBarriers {
		return
	}
	m.start = time.Now()
	m.last = m.start
	gsStart.Broadcast(ctx, m.Px.GS, struct{}{})
}

func (m *Main) at(ctx *chare.Ctx, step int, what string) *stepSums {
	if step < 0 || step >= len(m.Steps) {
		ctx.Fail(fmt.Errorf("main: %s of step %d (the run has %d)", what, step, m.P.Steps))
		return nil
	}
	return &m.Steps[step]
}

// GSpaceSums: the kinetic energy, and per state Σ|c|² and ⟨ψ|V|ψ⟩.
func (m *Main) GSpaceSums(ctx *chare.Ctx, v []float64) {
	m.record(ctx, v, "g-space sums", func(s *stepSums, vals []float64) { s.G = vals })
}

// RealSpaceSums: per state ∫|ψ|² and ∫V|ψ|² on the grid.
func (m *Main) RealSpaceSums(ctx *chare.Ctx, v []float64) {
	m.record(ctx, v, "real-space sums", func(s *stepSums, vals []float64) { s.R = vals })
}

// RhoRSums: the total charge and the local energy.
func (m *Main) RhoRSums(ctx *chare.Ctx, v []float64) {
	m.record(ctx, v, "density sums", func(s *stepSums, vals []float64) { s.RhoR = vals })
}

// RhoGSums: the Hartree energy.
func (m *Main) RhoGSums(ctx *chare.Ctx, v []float64) {
	m.record(ctx, v, "Hartree sums", func(s *stepSums, vals []float64) { s.RhoG = vals })
}

// record keeps a step's tagged reduction result and checks the steps
// that are complete.
func (m *Main) record(ctx *chare.Ctx, v []float64, what string, keep func(*stepSums, []float64)) {
	vals, step := untag(v)
	if s := m.at(ctx, step, what); s != nil {
		keep(s, vals)
		m.check(ctx, step)
	}
}

// OrthoReport: [0, step, |ΨᴴΨ − I|, 0] from the Λ pass, [1, step,
// iterations, residual] from an orthonormalisation.
func (m *Main) OrthoReport(ctx *chare.Ctx, v []float64) {
	step := int(v[1])
	s := m.at(ctx, step, "Ortho's report")
	if s == nil {
		return
	}
	if v[0] == 0 {
		s.Checked, s.E.OrthoError = true, v[2]
	} else {
		s.NS, s.E.NSIters, s.E.NSResidual = true, int(v[2]), v[3]
	}
	m.check(ctx, step)
}

// check checks a step's invariants once all its reductions came, and
// the steps are checked in order.
func (m *Main) check(ctx *chare.Ctx, step int) {
	for m.Done < len(m.Steps) {
		k := m.Done
		s := &m.Steps[k]
		if k == 0 {
			if !s.NS {
				return
			}
			m.Done++
			continue
		}
		if s.G == nil || s.R == nil || s.RhoR == nil || s.RhoG == nil || !s.Checked || (k < m.P.Steps && !s.NS) {
			return
		}
		if err := m.invariants(k, s); err != nil {
			ctx.Fail(err)
			return
		}
		s.G, s.R, s.RhoR, s.RhoG = nil, nil, nil, nil
		now := time.Now()
		m.stepMs = append(m.stepMs, float64(now.Sub(m.last).Nanoseconds())/1e6)
		m.last = now
		e := s.E
		if k%m.P.Progress == 0 || k == m.P.Steps || k == 1 {
			ns := "-"
			if k < m.P.Steps {
				ns = fmt.Sprintf("%d", e.NSIters)
			}
			printf(ctx, "Step %d  E %.15g  kinetic %.12g  Hartree %.12g  local %.12g  |ΨᴴΨ−I| %.1e  NS %s  %.3f ms/step\n",
				k, e.Total, e.Kinetic, e.Hartree, e.Local, e.OrthoError, ns, m.stepMs[len(m.stepMs)-1])
		}
		m.Done++
		m.checkpointIfDue(ctx)
	}
	if !m.Over {
		m.Over = true
		m.finish(ctx)
	}
}

// AtBoundary: every GSpace finished step Boundary and waits for its
// checkpoint.
func (m *Main) AtBoundary(ctx *chare.Ctx, _ struct{}) {
	m.Boundary = m.LastCkpt + m.P.CkptPeriod
	m.checkpointIfDue(ctx)
}

func (m *Main) checkpointIfDue(ctx *chare.Ctx) {
	if m.Boundary == 0 || m.Done <= m.Boundary {
		return // the step's reports are still coming
	}
	printf(ctx, "[%d] CHECKPOINT at step %d\n", ctx.PE(), m.Boundary)
	m.LastCkpt, m.Boundary = m.Boundary, 0
	chare.Checkpoint(ctx, mainCkptDone.CallbackTo(MainT.MainProxy()))
}

// CheckpointDone resumes the steps after a checkpoint, in this run or in
// one restarted from it.
func (m *Main) CheckpointDone(ctx *chare.Ctx, _ struct{}) {
	if m.start.IsZero() { // restarted: this process's clock starts now
		m.report.Restarted = true
		m.start = time.Now()
		m.last = m.start
		chare.StepRange(ctx, m.Done, m.P.Steps)
	}
	gsResume.Broadcast(ctx, m.Px.GS, struct{}{})
}

// invariants checks Parseval per state, ⟨ψ|V|ψ⟩ through the round trip,
// the total charge and the potential energy's two ways.
func (m *Main) invariants(k int, s *stepSums) error {
	ns := m.P.States
	g, r := s.G, s.R
	bad := func(format string, args ...any) error {
		return InvariantError{Step: k, What: fmt.Sprintf(format, args...)}
	}
	var norms, vexp float64
	for st := 0; st < ns; st++ {
		ng, nr := g[1+st], r[st]
		if math.Abs(nr-ng) > parsevalTol*ng {
			return bad("Parseval: state %d has Σ|c(g)|² = %.17g but ∫|ψ|² = %.17g", st, ng, nr)
		}
		vg, vr := g[1+ns+st], r[ns+st]
		if math.Abs(vg-vr) > vexpTol*(1+math.Abs(vr)) {
			return bad("FFT round trip: state %d has ⟨ψ|V|ψ⟩ = %.17g in real space but %.17g back in g-space", st, vr, vg)
		}
		norms += ng
		vexp += occupation * vg
	}
	charge, eloc, eh := s.RhoR[0], s.RhoR[1], s.RhoG[0]
	if want := occupation * norms; math.Abs(charge-want) > chargeTol*want {
		return bad("total charge: Σρ(r)ΔV = %.17g but Σ occ·|c|² = %.17g", charge, want)
	}
	if !m.P.UnitPotential {
		if want := 2*eh + eloc; math.Abs(vexp-want) > vexpTol*(1+math.Abs(want)) {
			return bad("potential energy: Σ occ·⟨ψ|V|ψ⟩ = %.17g but 2·E_Hartree + E_local = %.17g", vexp, want)
		}
	}
	s.E.Kinetic, s.E.Hartree, s.E.Local = g[0], eh, eloc
	s.E.Total = g[0] + eh + eloc
	return nil
}

// vexpTol bounds the relative difference of ⟨ψ|V|ψ⟩ computed two ways.
const vexpTol = 1e-10

func (m *Main) finish(ctx *chare.Ctx) {
	r := &m.report
	r.Params = m.P
	for k := 1; k < len(m.Steps); k++ {
		r.Energies = append(r.Energies, m.Steps[k].E)
	}
	r.InitialNSIters = m.Steps[0].E.NSIters
	r.StepMs = m.stepMs
	if m.start.IsZero() {
		m.start = ctx.Started()
	}
	r.Wall = time.Since(m.start)
	last := r.Energies[len(r.Energies)-1]
	for _, v := range []struct {
		name  string
		value any
	}{
		{"states", m.P.States}, {"grid", m.P.Grid}, {"steps", m.P.Steps},
		{"ms_per_step_median", stat.Median(r.StepMs)},
		{"energy_first", r.Energies[0].Total}, {"energy_last", last.Total},
		{"ortho_error_max", r.maxOrthoError()},
	} {
		chare.Report(ctx, v.name, v.value)
	}
	ctx.Exit(0)
}

func printf(ctx *chare.Ctx, format string, args ...any) { fmt.Fprintf(ctx.Out(), format, args...) }

// Report is what a run measured.
type Report struct {
	Params         Params
	PEs            int
	Energies       []StepEnergies // steps 1..Steps
	InitialNSIters int
	StepMs         []float64
	Wall           time.Duration
	Restarted      bool
	Checked        bool
	Secondary      bool
	Ops            chare.Stats
	Processes      []chare.Process
	Runtime        *chare.Summary
}

func (r Report) maxOrthoError() float64 {
	w := 0.0
	for _, e := range r.Energies {
		w = max(w, e.OrthoError)
	}
	return w
}

// Run runs the proxy with the given parameters and runtime config,
// printing to w.
func Run(p Params, cfg chare.Config, w io.Writer) (Report, error) {
	if p.Progress <= 0 {
		p.Progress = 1 << 30
	}
	if cfg.PEs == 0 {
		cfg.PEs = runtime.GOMAXPROCS(0)
	}
	if cfg.Balancer != "" && p.LBPeriod == 0 {
		p.LBPeriod = DefaultLBPeriod
	}
	r := Report{Params: p, PEs: cfg.PEs}
	if err := p.Validate(); err != nil {
		return r, chare.InputError{Err: err}
	}
	if cfg.CkptEvery > 0 {
		return r, chare.InputError{Err: fmt.Errorf("flag --ckpt-period %v: the OpenAtom proxy checkpoints every N steps (--ckpt-period N)", cfg.CkptEvery)}
	}
	if cfg.Restart == "" {
		if err := fits(p, cfg.PEs, p.MaxMemory); err != nil {
			return r, chare.InputError{Err: err}
		}
	}
	cfg.Stdout = w
	res := chare.RunWith(MainT, p, cfg)
	if m, ok := res.Main.(*Main); ok && m.report.Energies != nil {
		r = m.report
		r.PEs = cfg.PEs
	}
	r.Ops, r.Processes, r.Runtime = res.Stats, res.Processes, res.Summary
	r.Checked, r.Secondary = res.Checked, res.Process != 0
	if reports, err := res.Reports("openatom"); !reports {
		return r, err
	}
	if r.Energies == nil {
		return r, fmt.Errorf("the run went quiet before its last step (a deadlock): %d point-to-point sends, %d multicasts, %d contributions",
			r.Ops.Ops.P2P, r.Ops.Ops.Multicasts, r.Ops.Ops.Contributions)
	}
	if res.Code != 0 {
		return r, fmt.Errorf("openatom exited with code %d", res.Code)
	}
	return r, nil
}

// Summary writes the run's summary.
func (r Report) Summary(w io.Writer) {
	p := r.Params
	fmt.Fprintf(w, "\nSummary\n")
	fmt.Fprintf(w, "  states %d, grid %d³, chunks %d, grain %d, steps %d, PEs %d\n", p.States, p.Grid, p.Chunks, p.Grain, p.Steps, r.PEs)
	if s := chare.ProcessSummary(r.Processes); s != "" {
		fmt.Fprintf(w, "  %s\n", s)
	}
	fmt.Fprintf(w, "  time per step: mean %.3f ms, median %.3f ms\n", stat.Mean(r.StepMs), stat.Median(r.StepMs))
	o := r.Ops.Ops
	steps := float64(p.Steps)
	fmt.Fprintf(w, "  traffic per step: point-to-point %.0f messages %.0f KiB, multicast %.0f (%.0f deliveries) %.0f KiB, reduction %.0f contributions %.0f KiB\n",
		float64(o.P2P)/steps, float64(o.P2PBytes)/steps/1024, float64(o.Multicasts)/steps, float64(o.Deliveries)/steps,
		float64(o.MulticastBytes)/steps/1024, float64(o.Contributions)/steps, float64(o.ReductionBytes)/steps/1024)
	if r.Runtime != nil {
		r.Runtime.WriteRuntime(w)
	}
	first, last := r.Energies[0], r.Energies[len(r.Energies)-1]
	fmt.Fprintf(w, "  energy: first step %.17g, last step %.17g\n", first.Total, last.Total)
	fmt.Fprintf(w, "  orthonormality: max |ΨᴴΨ − I| %.2e; Newton–Schulz %d iterations at start\n", r.maxOrthoError(), r.InitialNSIters)
}
