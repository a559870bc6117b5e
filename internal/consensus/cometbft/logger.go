package cometbft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	cmtlog "github.com/cometbft/cometbft/libs/log"
)

// slogLogger forwards CometBFT's log lines to a slog.Logger. CometBFT is
// chatty at Info (several lines per block), so its Debug and Info lines are
// forwarded only when the slog logger has Debug enabled; Warn and Error
// always are.
// ErrConsensusHalted is reported by Orderer.Err once CometBFT's consensus
// routine has stopped on a failure, typically because this broker's state
// gives a different app hash than the one 2/3+ of the validators committed.
var ErrConsensusHalted = errors.New("stele/consensus/cometbft: consensus halted")

type slogLogger struct {
	l *slog.Logger
	// halted is called when CometBFT reports that its consensus routine
	// stopped on a failure (nil: nobody listens).
	halted func(error)
}

var _ cmtlog.Logger = slogLogger{}

// newCometLogger adapts l (which names the component: the server gives
// component=cometbft) to CometBFT's logger.
func newCometLogger(l *slog.Logger) cmtlog.Logger {
	return slogLogger{l: l}
}

// consensusFailure is what CometBFT logs when its consensus routine stops
// on a panic: most importantly "+2/3 committed an invalid block", which is
// how a broker whose state no longer matches the chain (a different app
// hash) finds out. The node stays up but will never commit again.
const consensusFailure = "CONSENSUS FAILURE!!!"

// blockSyncValidation is what block sync logs when a block it fetched
// fails validation; wrongAppHash is how that error reads when the block's
// app hash differs from the one this node computed.
const (
	blockSyncValidation = "Error in validation"
	wrongAppHash        = "wrong Block.Header.AppHash"
)

func (s slogLogger) verbose() bool {
	return s.l.Enabled(context.Background(), slog.LevelDebug)
}

// Debug implements cmtlog.Logger.
func (s slogLogger) Debug(msg string, keyvals ...any) {
	if s.verbose() {
		s.l.Debug(msg, keyvals...)
	}
}

// Info implements cmtlog.Logger.
func (s slogLogger) Info(msg string, keyvals ...any) {
	if s.verbose() {
		s.l.Info(msg, keyvals...)
	}
}

// Warn implements cmtlog.Logger.
func (s slogLogger) Warn(msg string, keyvals ...any) { s.l.Warn(msg, keyvals...) }

// Error implements cmtlog.Logger. A few errors CometBFT logs on every
// orderly shutdown or cleanup are demoted to Debug.
func (s slogLogger) Error(msg string, keyvals ...any) {
	if s.halted != nil {
		switch {
		case msg == consensusFailure:
			s.halted(fmt.Errorf("%w: %v", ErrConsensusHalted, valueOf(keyvals, "err")))
		case msg == blockSyncValidation && strings.Contains(fmt.Sprint(valueOf(keyvals, "err")), wrongAppHash):
			// Block sync verifies the commit (2/3+ of the voting power
			// signed this block) before validating the block against our
			// state, so a wrong app hash here means our state is wrong, not
			// the peer: the same divergence, met while catching up.
			s.halted(fmt.Errorf("%w: block sync at height %v: %v", ErrConsensusHalted, valueOf(keyvals, "height"), valueOf(keyvals, "err")))
		}
	}
	if benign(msg, keyvals) {
		s.Debug(msg, keyvals...)
		return
	}
	s.l.Error(msg, keyvals...)
}

// benign reports CometBFT error lines that describe an orderly stop or the
// cleanup after a failed start, not a fault.
func benign(msg string, keyvals []any) bool {
	switch msg {
	case "Stopped accept routine, as transport is closed",
		"Not stopping P2P Switch service -- has not been started yet",
		"Won't start a peer - switch is not running":
		return true
	case "Error closing switch", "Error stopping pool":
		for i := 0; i+1 < len(keyvals); i += 2 {
			if k, ok := keyvals[i].(string); ok && k == "err" {
				if err, ok := keyvals[i+1].(error); ok {
					return err.Error() == "not started" || err.Error() == "already stopped"
				}
			}
		}
	}
	return false
}

// With implements cmtlog.Logger.
func (s slogLogger) With(keyvals ...any) cmtlog.Logger {
	return slogLogger{l: s.l.With(keyvals...), halted: s.halted}
}

func valueOf(keyvals []any, key string) any {
	for i := 0; i+1 < len(keyvals); i += 2 {
		if k, ok := keyvals[i].(string); ok && k == key {
			return keyvals[i+1]
		}
	}
	return nil
}

// haltingLogger makes l call halted when CometBFT reports a consensus
// failure.
func haltingLogger(l cmtlog.Logger, halted func(error)) cmtlog.Logger {
	sl := l.(slogLogger)
	sl.halted = halted
	return sl
}
