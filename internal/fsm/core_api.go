package fsm

import (
	"context"

	"github.com/stele-io/stele/internal/fsm/core"
)

// The core's names the broker uses, under the package it imports: fsm is
// the one state-machine package outside it (the application the modules
// are assembled into), and these are the core's types, errors and
// functions it passes on unchanged.

type (
	Block           = core.Block
	BlockOutcome    = core.BlockOutcome
	Misbehavior     = core.Misbehavior
	MisbehaviorKind = core.MisbehaviorKind
	ValidatorUpdate = core.ValidatorUpdate
	Command         = core.Command
	Digest          = core.Digest
	Nonce           = core.Nonce
	RecordError     = core.RecordError
	Restore         = core.Restore
	Result          = core.Result
	Snapshot        = core.Snapshot
	SnapshotCapture = core.SnapshotCapture
	SnapshotOffer   = core.SnapshotOffer
	TopicID         = core.TopicID
	TopicPartitions = core.TopicPartitions
	Tx              = core.Tx
	Tick            = core.Tick
)

const (
	DuplicateVote     = core.DuplicateVote
	LightClientAttack = core.LightClientAttack
	KindTick          = core.KindTick
	CodeResubmit      = core.CodeResubmit
	MaxRecordErrors   = core.MaxRecordErrors
)

// The core's errors (the same values: errors.Is holds across the names).
var (
	ErrChunkHash         = core.ErrChunkHash
	ErrChunkOrder        = core.ErrChunkOrder
	ErrLocalFault        = core.ErrLocalFault
	ErrNoProof           = core.ErrNoProof
	ErrSnapshotDamaged   = core.ErrSnapshotDamaged
	ErrSnapshotFormat    = core.ErrSnapshotFormat
	ErrSnapshotMalformed = core.ErrSnapshotMalformed
	ErrSnapshotMismatch  = core.ErrSnapshotMismatch
	ErrStateMoved        = core.ErrStateMoved
	ErrStateRoot         = core.ErrStateRoot
)

// BuildSnapshot is core.BuildSnapshot.
func BuildSnapshot(ctx context.Context, c *SnapshotCapture, prev *Snapshot) (*Snapshot, error) {
	return core.BuildSnapshot(ctx, c, prev)
}

// ForgeSnapshot is core.ForgeSnapshot.
func ForgeSnapshot(s *Snapshot, alter func(key, value []byte) []byte) (*Snapshot, error) {
	return core.ForgeSnapshot(s, alter)
}

// OpenSnapshot is core.OpenSnapshot.
func OpenSnapshot(dir string) (*Snapshot, error) { return core.OpenSnapshot(dir) }
