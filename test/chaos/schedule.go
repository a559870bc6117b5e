package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Fault kinds the suite injects. Each lasts a while and is then undone
// (restart, SIGCONT, heal) before the next begins, so at most one fault is
// in force at a time; "split" and "kill-all" take more than f brokers and
// stop the chain while they last (safety must hold, liveness returns).
const (
	FaultKill    = "kill"     // SIGKILL one broker, restart it afterwards
	FaultPause   = "pause"    // SIGSTOP one broker, SIGCONT afterwards
	FaultIsolate = "isolate"  // cut one broker off from its peers, heal afterwards
	FaultOneWay  = "one-way"  // lose what one broker sends its peers (it still hears them), heal afterwards
	FaultSplit   = "split"    // split the brokers into two halves, heal afterwards
	FaultKillAll = "kill-all" // SIGKILL every broker at once, restart them all
	// FaultByzantine restarts one broker as a liar (the test-only
	// stelebyzantine build): it proposes undecodable blocks, signs batches
	// it does not store and serves its peers corrupted batches; then it is
	// restarted honest.
	FaultByzantine = "byzantine"
	// FaultCorrupt kills one broker, damages one of its partition files
	// (a byte flipped in a batch, or the file cut in the middle of one),
	// requires it to refuse to start on them, then rebuilds it: its state
	// wiped, it rejoins from its peers.
	FaultCorrupt = "corrupt"
	// FaultTamper restarts one broker from the stelebyzantine build with
	// its state diverging a few heights later (a wrong app hash, as a
	// tampered store gives); it must find out and exit, and is rebuilt.
	FaultTamper = "tamper"
	// FaultClock restarts one broker from the stelebyzantine build with
	// its clock off (one of clockOffsets, by Variant): every vote and
	// proposal its validator signs carries the wrong time, and so do its
	// own time-of-day reads. Block time, the median of the validators'
	// vote timestamps, must not move: the blocks committed meanwhile are
	// checked against the harness's clock. Then it is restarted honest.
	FaultClock = "clock"
	// FaultPowerCut SIGKILLs one broker, or all four (by Variant), and
	// drops every append to their partition logs, indexes and batch
	// stores that they had not fsynced, as a power cut would
	// (harness.LoseUnsynced); then restarts them.
	FaultPowerCut = "power-cut"
	// FaultMembership changes the membership with signed changes
	// (docs/cluster.md, "Membership"), by Variant: it demotes one broker
	// to a replica with the validators' votes (it keeps applying the chain
	// and serving reads, and votes on nothing), then promotes it back
	// until it signs again; or it adds a fifth broker (stele cluster add,
	// the administrator's key) that joins and catches up as a replica,
	// then removes it (it exits with status 11). Each broker added has a
	// new node id; once the ports reserved for them are used up, the
	// fault demotes and promotes.
	FaultMembership = "membership"
)

// clockOffsets are the clock errors a FaultClock broker gets.
var clockOffsets = []time.Duration{time.Hour, -time.Hour, 5 * time.Minute, -5 * time.Minute, 20 * time.Second, -20 * time.Second}

// FaultKinds lists every kind Schedule can choose, in a fixed order.
func FaultKinds() []string {
	return []string{FaultKill, FaultPause, FaultIsolate, FaultOneWay, FaultSplit, FaultKillAll, FaultByzantine, FaultCorrupt, FaultTamper, FaultClock, FaultPowerCut, FaultMembership}
}

// Planned is one fault of a schedule: when it begins (from the start of
// the run), on which brokers, and for how long.
type Planned struct {
	At    time.Duration
	Kind  string
	Nodes []int
	For   time.Duration
	// Variant chooses among a fault's forms (which file a corrupt fault
	// damages, and how).
	Variant uint32
}

func (p Planned) String() string {
	return fmt.Sprintf("%v %s %v for %v", p.At.Round(time.Millisecond), p.Kind, p.Nodes, p.For.Round(time.Millisecond))
}

// weight of each kind in a schedule: the faults of f brokers most, the ones
// that stop the chain least.
var weight = map[string]int{FaultKill: 4, FaultPause: 3, FaultIsolate: 2, FaultOneWay: 2, FaultSplit: 1, FaultKillAll: 1, FaultByzantine: 2, FaultCorrupt: 1, FaultTamper: 1, FaultClock: 2, FaultPowerCut: 2, FaultMembership: 2}

// Schedule returns the faults of a run of length d on a cluster of nodes
// brokers, from seed alone: the same arguments give the same schedule.
// Faults follow one another with a quiet gap of gap/2 to 3*gap/2 between
// them, each lasting hold/4 to hold; the last ends before d. kinds limits
// the choice (nil: every kind).
func Schedule(seed uint64, d, gap, hold time.Duration, nodes int, kinds []string) ([]Planned, error) {
	if nodes < 2 {
		return nil, fmt.Errorf("stele/chaos: a schedule needs at least 2 brokers, not %d", nodes)
	}
	if kinds == nil {
		kinds = FaultKinds()
	}
	var choice []string // each kind repeated by its weight
	for _, k := range FaultKinds() {
		if slices.Contains(kinds, k) {
			for range weight[k] {
				choice = append(choice, k)
			}
		}
	}
	for _, k := range kinds {
		if !slices.Contains(FaultKinds(), k) {
			return nil, fmt.Errorf("stele/chaos: unknown fault kind %q (known: %s)", k, strings.Join(FaultKinds(), ", "))
		}
	}
	if len(choice) == 0 {
		return nil, nil
	}
	rng := rand.New(rand.NewPCG(seed, seed^0xc4a05))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	var out []Planned
	at := between(gap/2, gap*3/2)
	for {
		p := Planned{At: at, Kind: choice[rng.IntN(len(choice))], For: between(hold/4, hold), Variant: rng.Uint32()}
		if at+p.For > d {
			return out, nil
		}
		perm := rng.Perm(nodes)
		switch p.Kind {
		case FaultKill, FaultPause, FaultIsolate, FaultOneWay, FaultByzantine, FaultCorrupt, FaultTamper, FaultClock, FaultMembership:
			p.Nodes = perm[:1]
		case FaultSplit:
			p.Nodes = perm[:nodes/2] // one side; the rest is the other
		case FaultKillAll:
			p.Nodes = perm
		case FaultPowerCut:
			p.Nodes = perm[:1]
			if p.Variant%2 == 1 {
				p.Nodes = perm
			}
		}
		slices.Sort(p.Nodes)
		out = append(out, p)
		at += p.For + between(gap/2, gap*3/2)
	}
}
