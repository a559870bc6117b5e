package core

// KindTick is the command that changes nothing.
const KindTick Kind = 15

// Tick changes nothing. A broker submits one when a timer that runs on
// block time (a group session or rebalance deadline) has fallen due by
// the wall clock while the chain is idle, so that a block comes and the
// timer acts without waiting for the next empty block.
type Tick struct{}

func (Tick) Kind() Kind     { return KindTick }
func (Tick) Encode(*Writer) {}

// NewRegistry is a registry holding the core's own command, Tick, for
// the modules to register in.
func NewRegistry() *Registry {
	r := &Registry{}
	RegisterCommand(r, KindTick, "Tick", ModCore, func(*Reader) Tick { return Tick{} }, nil,
		func(*Machine, Tick, CmdAt) Result { return Result{} })
	return r
}
