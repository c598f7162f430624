package main

import (
	"cmp"
	"fmt"
	"slices"
)

// Ratio sets one kiln row against the floor measured in the same run.
type Ratio struct {
	Case    string  `json:"case"`
	KilnMS  float64 `json:"kiln_p50_ms"`
	Basis   string  `json:"basis"` // what the ratio divides by what
	FloorMS float64 `json:"floor_ms"`
	Ratio   float64 `json:"ratio"`
	Target  float64 `json:"target"`
	// MovedRatio divides the same part of kiln's time by the floor of the bytes kiln's
	// wire counter saw cross, each way: it differs from Ratio when the payload did not
	// make the trip its design allows (an unchanged state stays in the sandbox).
	MovedFloorMS float64 `json:"moved_floor_ms,omitempty"`
	MovedRatio   float64 `json:"ratio_on_bytes_moved,omitempty"`
}

// ratioTarget is the bound on every ratio but the small calls' (cellsTarget).
const ratioTarget = 1.3

// pair sets a kiln row against the floor row of the same exchange with no kiln, for
// rows whose floor is not the bytes they move: the live rows.
type pair struct {
	row, floor string
	target     float64
	basis      string // what the floor row holds, for the ratio's basis
	// split, when set, is the floor row the breakdown sets the row against in place
	// of floor, with what it holds: the same exchanges as kiln's, where floor has
	// less (no state captured) to set a target against.
	split, splitBasis string
	// kiln says floor is one of kiln's own rows of the same run, not the floor's.
	kiln bool
}

// statelessRow is the kiln row every other row is set against.
const statelessRow = "warm print(1), stateless, c=1"

// ratios compares kiln's rows with the floor: stateless print(1) with the bare attach,
// each real state row and each file row with the same exchange over a bare attach (an
// output file's with the disk store's synced write on top), each other transfer
// row's time above stateless print(1) with the bare attach moving the same bytes the
// same ways, and each live row with the same exchanges on one bare sandbox.
func ratios(r *Results) []Ratio {
	f := r.Floor
	stateless := r.summary(statelessRow)
	if f == nil || stateless.N == 0 {
		return pairRatios(r, nil) // the pairs set against kiln's own rows still stand
	}
	var out []Ratio
	if f.BareExec.N > 0 && f.BareExec.P50 > 0 {
		out = append(out, Ratio{Case: statelessRow, KilnMS: stateless.P50, Basis: "kiln p50 / bare attach first print(1) p50",
			FloorMS: f.BareExec.P50, Ratio: round(stateless.P50/f.BareExec.P50, 2), Target: ratioTarget})
	}
	for _, t := range r.transfers {
		s := r.summary(t.name)
		if t.bare != "" {
			if bare := f.summary(t.bare); s.N > 0 && bare.N > 0 && bare.P50 > 0 {
				out = append(out, Ratio{Case: t.name, KilnMS: s.P50, FloorMS: round(bare.P50, 2), Ratio: round(s.P50/bare.P50, 2), Target: ratioTarget,
					Basis: "kiln p50 / bare attach p50 of the same exchange: the session's state blob, the same code"})
			}
			continue
		}
		if t.file {
			if x, ok := fileRatio(f, t, s); ok {
				out = append(out, x)
			}
			continue
		}
		if s.N == 0 || t.bytes < 1<<20 {
			continue // below a megabyte the floor is within the noise of the stateless row
		}
		floor, ok := transferFloor(f.Bytes, int64(t.bytes), t.in, t.out)
		if !ok || floor <= 0 {
			continue
		}
		part := s.P50 - stateless.P50
		x := Ratio{Case: t.name, KilnMS: s.P50, FloorMS: round(floor, 2), Ratio: round(part/floor, 2), Target: ratioTarget,
			Basis: fmt.Sprintf("(kiln p50 - stateless p50 %.1f) / floor of %s %s", stateless.P50, human(t.bytes), ways(t.in, t.out))}
		if s.WireIn != nil && s.WireOut != nil {
			in, okIn := floorNet(f.Bytes, *s.WireIn, true)
			out, okOut := floorNet(f.Bytes, *s.WireOut, false)
			if moved := in + out; okIn && okOut && moved >= 0.01 {
				x.MovedFloorMS, x.MovedRatio = round(moved, 2), round(part/moved, 2)
			}
		}
		out = append(out, x)
	}
	return append(out, pairRatios(r, f)...)
}

// fileRatio sets a file row against the same exchange with no kiln: the first run on a
// fresh sandbox over a bare attach with the same file and code, which moves the file's
// bytes through the attach and through the REPL's /mnt/data as any design must; and for
// an output file, which kiln's disk store keeps, a synced write of its bytes on top.
func fileRatio(f *Floor, t transfer, s Summary) (Ratio, bool) {
	bare, basis := f.fileFloor(t), "kiln p50 / bare attach p50 of the same exchange: the same file and code"
	if t.out {
		basis = "kiln p50 / (bare attach p50 of the same exchange, the same code, + a synced write of the file, as the disk store keeps it)"
	}
	if s.N == 0 || bare.N == 0 || bare.P50 <= 0 || (t.out && f.DiskWrite.N == 0) {
		return Ratio{}, false
	}
	floor := bare.P50
	if t.out {
		floor += f.DiskWrite.P50
	}
	return Ratio{Case: t.name, KilnMS: s.P50, FloorMS: round(floor, 2), Ratio: round(s.P50/floor, 2), Target: ratioTarget, Basis: basis}, true
}

// fileFloor is the bare attach's run of file row t's exchange: a file in (placed, read
// back) or out (written, returned); a file row moves its file one way.
func (f *Floor) fileFloor(t transfer) Summary {
	if t.out {
		return f.BareFileOut
	}
	return f.BareFileIn
}

// pairRatios sets each pair's row against its floor row: one of kiln's own rows for a
// kiln pair, else the row of f (none without a floor).
func pairRatios(r *Results, f *Floor) []Ratio {
	var out []Ratio
	for _, p := range r.pairs {
		var floor Summary
		switch {
		case p.kiln:
			floor = r.summary(p.floor)
		case f != nil:
			floor = f.summary(p.floor)
		}
		if s := r.summary(p.row); s.N > 0 && floor.N > 0 && floor.P50 > 0 {
			out = append(out, Ratio{Case: p.row, KilnMS: s.P50, FloorMS: round(floor.P50, 2), Ratio: round(s.P50/floor.P50, 2), Target: p.target,
				Basis: "kiln p50 / p50 of " + p.basis})
		}
	}
	return out
}

func ways(in, out bool) string {
	switch {
	case in && out:
		return "in + out"
	case in:
		return "in"
	}
	return "out"
}

// transferFloor is the floor of moving n bytes in, out or both.
func transferFloor(rows []BytesRow, n int64, in, out bool) (float64, bool) {
	var sum float64
	for _, way := range []struct{ on, in bool }{{in, true}, {out, false}} {
		if !way.on {
			continue
		}
		ms, ok := floorNet(rows, n, way.in)
		if !ok {
			return 0, false
		}
		sum += ms
	}
	return sum, true
}

// floorNet interpolates the net time to move n bytes one way (in: host to container)
// linearly between the measured sizes, from nothing at 0 bytes; past the largest size
// it goes on at the largest size's cost per byte.
func floorNet(rows []BytesRow, n int64, in bool) (float64, bool) {
	type point struct{ bytes, ms float64 }
	pts := []point{{0, 0}}
	for _, r := range rows {
		if r.Bytes > 0 {
			ms := r.OutNetMS
			if in {
				ms = r.InNetMS
			}
			pts = append(pts, point{float64(r.Bytes), ms})
		}
	}
	if len(pts) == 1 {
		return 0, false
	}
	slices.SortFunc(pts, func(a, b point) int { return cmp.Compare(a.bytes, b.bytes) })
	x := float64(n)
	for i := 1; i < len(pts); i++ {
		if x <= pts[i].bytes {
			a, b := pts[i-1], pts[i]
			return a.ms + (b.ms-a.ms)*(x-a.bytes)/(b.bytes-a.bytes), true
		}
	}
	last := pts[len(pts)-1]
	return last.ms * x / last.bytes, true
}

// Part splits one kiln row's median into where its time goes, from the floor of the
// same run: moving the bytes (bare attach), the REPL's own work on the exchange (the
// bare attach's round trip with the same request, less the bytes), the synced write
// that keeps an output file on the disk store, and kiln (the rest: HTTP, session,
// store, pool and executor).
type Part struct {
	Case        string  `json:"case"`
	KilnMS      float64 `json:"kiln_p50_ms"`
	TransportMS float64 `json:"transport_ms"`
	REPLMS      float64 `json:"repl_ms"`
	DiskMS      float64 `json:"disk_ms,omitempty"`
	// InExchangeMS is the part of kiln's own inside the exchange (kiln's exec_ms less
	// the bare attach's round trip); the rest of kiln's own is around it (HTTP,
	// session and store).
	InExchangeMS *float64 `json:"kiln_own_in_exchange_ms,omitempty"`
	OwnMS        float64  `json:"kiln_own_ms"`
	Basis        string   `json:"basis"`
}

// breakdown splits stateless print(1), the 10 MB session rows, the real state rows, the
// file rows and the live rows, whose bare attach counterparts the floor measures.
func breakdown(r *Results) []Part {
	f := r.Floor
	if f == nil || f.BareExec.N == 0 {
		return nil
	}
	var out []Part
	if s := r.summary(statelessRow); s.N > 0 {
		out = append(out, Part{Case: statelessRow, KilnMS: s.P50, REPLMS: round(f.BareExec.P50, 2),
			OwnMS: round(s.P50-f.BareExec.P50, 2), InExchangeMS: inExchange(s, f.BareExec),
			Basis: "REPL: bare attach first print(1), its transport included"})
	}
	if in, ok := floorNet(f.Bytes, bareStateSize, true); ok && f.BareState.N > 0 {
		for _, name := range []string{resumedStateRow(bareStateSize), readOnlyRow(bareStateSize)} {
			if s := r.summary(name); s.N > 0 {
				out = append(out, Part{Case: name, KilnMS: s.P50, TransportMS: round(in, 2),
					REPLMS: round(f.BareState.P50-in, 2), OwnMS: round(s.P50-f.BareState.P50, 2), InExchangeMS: inExchange(s, f.BareState),
					Basis: "transport: 10 MB in; REPL: bare attach first run with the same state, less the transport"})
			}
		}
	}
	for _, t := range r.transfers {
		if t.bare != "" {
			if p, ok := realPart(f, t, r.summary(t.name)); ok {
				out = append(out, p)
			}
			continue
		}
		if !t.file {
			continue
		}
		bare, s := f.fileFloor(t), r.summary(t.name)
		moved, ok := transferFloor(f.Bytes, int64(t.bytes), t.in, t.out)
		if s.N == 0 || bare.N == 0 || !ok {
			continue
		}
		p := Part{Case: t.name, KilnMS: s.P50, TransportMS: round(moved, 2), REPLMS: round(bare.P50-moved, 2), InExchangeMS: inExchange(s, bare),
			Basis: "transport: 20 MB " + ways(t.in, t.out) + "; REPL: bare attach first run with the same file and code, less the transport"}
		own := s.P50 - bare.P50
		if t.out && f.DiskWrite.N > 0 {
			p.DiskMS = round(f.DiskWrite.P50, 2)
			own -= f.DiskWrite.P50
			p.Basis += "; disk: a 20 MB write, synced and renamed, as the disk store keeps a file"
		}
		p.OwnMS = round(own, 2)
		out = append(out, p)
	}
	for _, p := range r.pairs {
		if p.kiln {
			continue // set against kiln's own row: no bare exchange to split it by
		}
		floor, basis := p.floor, p.basis
		if p.split != "" {
			floor, basis = p.split, p.splitBasis
		}
		if s, bare := r.summary(p.row), f.summary(floor); s.N > 0 && bare.N > 0 {
			out = append(out, Part{Case: p.row, KilnMS: s.P50, REPLMS: round(bare.P50, 2), OwnMS: round(s.P50-bare.P50, 2),
				InExchangeMS: inExchange(s, bare), Basis: "REPL: " + basis + ", its transport included"})
		}
	}
	return out
}

// realPart splits a real state row: the state blob moved the ways the call moves it,
// the REPL's restore, run and capture (the same exchange over a bare attach, less the
// moving), and kiln's own (the rest).
func realPart(f *Floor, t transfer, s Summary) (Part, bool) {
	bare := f.summary(t.bare)
	moved, ok := transferFloor(f.Bytes, int64(t.bytes), t.in, t.out)
	if s.N == 0 || bare.N == 0 || !ok {
		return Part{}, false
	}
	return Part{Case: t.name, KilnMS: s.P50, TransportMS: round(moved, 2), REPLMS: round(bare.P50-moved, 2),
		OwnMS: round(s.P50-bare.P50, 2), InExchangeMS: inExchange(s, bare),
		Basis: fmt.Sprintf("transport: %s %s; REPL: bare attach first run with the session's state blob and the same code, less the transport",
			human(t.bytes), ways(t.in, t.out))}, true
}

// inExchange is kiln's exec_ms less the bare attach's round trip with the same
// request, when kiln's row recorded it.
func inExchange(s, bare Summary) *float64 {
	if s.ExecP50 == 0 {
		return nil
	}
	v := round(s.ExecP50-bare.P50, 2)
	return &v
}
