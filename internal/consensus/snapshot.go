package consensus

// Snapshot describes one snapshot of the application's state at a height,
// as advertised to peers for state sync.
type Snapshot struct {
	// Height is the height whose committed state the snapshot holds.
	Height int64
	// Format is the application's snapshot format version.
	Format uint32
	// Chunks is the number of chunks; a peer fetches them by index.
	Chunks uint32
	// Hash identifies the snapshot's contents (the application defines it;
	// peers holding identical snapshots advertise the same hash).
	Hash []byte
	// Metadata is the application's description of the snapshot, such as
	// the hash of every chunk.
	Metadata []byte
}

// OfferResult is the application's answer to a snapshot offered for
// restore.
type OfferResult int

// Answers to OfferSnapshot, as CometBFT's ResponseOfferSnapshot has them.
const (
	// OfferAccept: restore this snapshot; chunks follow.
	OfferAccept OfferResult = iota
	// OfferAbort: stop state sync altogether (the application cannot
	// restore anything, e.g. it is not empty).
	OfferAbort
	// OfferReject: try another snapshot.
	OfferReject
	// OfferRejectFormat: try no snapshot of this format.
	OfferRejectFormat
	// OfferRejectSender: try no snapshot from the peers that advertised this one.
	OfferRejectSender
)

// ApplyResult is the application's answer to one restored chunk.
type ApplyResult int

// Answers to ApplySnapshotChunk, as CometBFT's ResponseApplySnapshotChunk has them.
const (
	// ApplyAccept: the chunk is applied; send the next.
	ApplyAccept ApplyResult = iota
	// ApplyAbort: stop state sync altogether.
	ApplyAbort
	// ApplyRetry: fetch this chunk again (from another peer if the sender
	// is rejected) and apply it again.
	ApplyRetry
	// ApplyRetrySnapshot: start this snapshot over.
	ApplyRetrySnapshot
	// ApplyRejectSnapshot: give this snapshot up and try another.
	ApplyRejectSnapshot
)

// ChunkOutcome is the application's answer to ApplySnapshotChunk.
type ChunkOutcome struct {
	Result ApplyResult
	// Refetch lists chunks to fetch again (a chunk found bad).
	Refetch []uint32
	// RejectSenders lists peers (as given to ApplySnapshotChunk) to ban from
	// this state sync: they sent a chunk that does not match the snapshot.
	RejectSenders []string
}

// Snapshotter is implemented by an Application that serves and restores
// state sync snapshots. An orderer calls ListSnapshots and
// LoadSnapshotChunk concurrently with the block calls (to serve peers), and
// OfferSnapshot and ApplySnapshotChunk on a node joining with an empty
// state, before any block is applied.
type Snapshotter interface {
	// ListSnapshots returns the snapshots this node can serve.
	ListSnapshots() ([]Snapshot, error)
	// LoadSnapshotChunk returns chunk index of the snapshot at height in
	// format, or nil if this node does not hold it (any more).
	LoadSnapshotChunk(height int64, format, index uint32) ([]byte, error)
	// OfferSnapshot offers a peer's snapshot for restore. appHash is the
	// app hash at the snapshot's height, verified by the orderer (for
	// CometBFT, by its light client against the validators' signatures).
	OfferSnapshot(s Snapshot, appHash []byte) OfferResult
	// ApplySnapshotChunk applies the chunks of the accepted snapshot, in
	// index order; sender names the peer that sent it. After the last
	// chunk, Info must report the snapshot's height and app hash.
	ApplySnapshotChunk(index uint32, chunk []byte, sender string) ChunkOutcome
}
