package core

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrLocalFault is returned by ApplyBlock and Commit when this broker's own
// disk or store failed (a write, a sync, a read of its state). Such a fault
// is this broker's, not the chain's: turning it into a result would hash
// a local accident into the app hash, so this broker would compute another
// hash than its peers and halt anyway, or, on a single node, commit the
// accident. So the state machine stops instead (fail-stop): the block is
// neither answered nor committed, every later ApplyBlock and Commit
// returns the same error, and the broker must be restarted once the cause
// is fixed; Open then cuts the logs back to the committed state and the
// orderer replays the block.
var ErrLocalFault = errors.New("stele/fsm: local storage fault (fail-stop)")

// ErrStopScan ends a store scan or a walk of a batch's records early; the
// walks that return it swallow it. The core's: every module walks the
// store or records.
var ErrStopScan = errors.New("stele/fsm: scan stopped")

// LocalFault records the first local fault of the block and returns a
// placeholder result; ApplyBlock sees f.fault after the command and returns
// it instead of an outcome, so the placeholder never reaches anyone.
func (f *Machine) LocalFault(format string, args ...any) Result {
	if f.fault == nil {
		f.fault = fmt.Errorf("%w at height %d: %w", ErrLocalFault, f.Height, fmt.Errorf(format, args...))
	}
	return Result{Code: kerr.KafkaStorageError.Code}
}

// Faulted records err (a Commit step's failure) as the state machine's
// fault and returns it.
func (f *Machine) Faulted(err error) error {
	if f.fault == nil {
		f.fault = fmt.Errorf("%w at height %d: %w", ErrLocalFault, f.Height, err)
	}
	return f.fault
}

// Fault is the local fault that stopped the state machine, or nil.
func (f *Machine) Fault() error { return f.fault }
