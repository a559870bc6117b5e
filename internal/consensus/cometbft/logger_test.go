package cometbft

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestCometLoggerLevels(t *testing.T) {
	for _, tc := range []struct {
		level slog.Level
		want  []string
		skip  []string
	}{
		{slog.LevelInfo, []string{"warned", "failed", "module=p2p"}, []string{"chatty", "detail", "transport is closed"}},
		{slog.LevelDebug, []string{"chatty", "detail", "warned", "failed", "transport is closed"}, nil},
	} {
		var buf bytes.Buffer
		l := newCometLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level}))).With("module", "p2p")
		l.Info("chatty")
		l.Debug("detail")
		l.Warn("warned")
		l.Error("failed", "err", errors.New("boom"))
		l.Error("Stopped accept routine, as transport is closed")
		l.Error("Error stopping pool", "err", errors.New("already stopped"))
		out := buf.String()
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("level %v: %q missing from\n%s", tc.level, w, out)
			}
		}
		for _, s := range tc.skip {
			if strings.Contains(out, s) {
				t.Errorf("level %v: %q should not be logged:\n%s", tc.level, s, out)
			}
		}
		if strings.Contains(out, "level=ERROR msg=\"Error stopping pool\"") {
			t.Errorf("a benign shutdown error logged as an error:\n%s", out)
		}
	}
}

// TestLoggerReportsHalts: a consensus failure, and a block sync that finds
// a committed block's app hash differs from ours, both halt; other block
// sync validation errors (a bad peer) do not.
func TestLoggerReportsHalts(t *testing.T) {
	var halted []error
	l := haltingLogger(newCometLogger(slog.New(slog.DiscardHandler)), func(err error) { halted = append(halted, err) }).With("module", "blocksync")
	l.Error("Error in validation", "height", 7, "err", errors.New("invalid commit signatures"))
	if len(halted) != 0 {
		t.Fatalf("a peer's bad commit halted the node: %v", halted)
	}
	l.Error("Error in validation", "height", 7, "err", errors.New("wrong Block.Header.AppHash.  Expected 01, got 02"))
	l.Error("CONSENSUS FAILURE!!!", "err", "+2/3 prevoted for an invalid block")
	if len(halted) != 2 || !errors.Is(halted[0], ErrConsensusHalted) || !errors.Is(halted[1], ErrConsensusHalted) {
		t.Fatalf("halts reported: %v", halted)
	}
}
