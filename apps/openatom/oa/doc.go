// Package oa is the OpenAtom proxy on charmgo: the arrays, phases and
// messages of OpenAtom's Car–Parrinello step (GSpace, RealSpace,
// RhoR/RhoG, PairCalc, Ortho; UIUC-PPL/OpenAtom's src_charm_driver) with
// real, checked math on small grids: plane-wave states, FFT transposes,
// the density and a Hartree-plus-local potential, the Λ and
// orthonormalisation passes with Newton–Schulz. Its point is OpenAtom's
// traffic (about a third each point-to-point, multicast and reduction)
// for comparing the fault-tolerance protocols. Run it with Run, or as
// the program in apps/openatom.
package oa
