// Package proof checks that a record batch read from a Stele broker is the
// one the cluster committed, without trusting the broker that served it.
//
// Every broker's app hash commits to each batch appended to a partition log
// in its block, exactly as the log stores it (after the broker set its base
// offset): the block's app hash is AppHash(digest, stateRoot, root), where root is the
// Merkle root (CometBFT's crypto/merkle, RFC 6962) of the leaves
// BatchLeaf(...) of the batches appended in that block, in apply order, and
// digest covers the rest of the block's effects. CometBFT puts the app hash
// of height H in the header of height H+1, which more than two thirds of the
// validators' voting power sign.
//
// A Batch (as served by GET /v1/topics/{topic}/partitions/{p}/proof) carries
// a batch, the digest, root and Merkle path of its block, and the signed
// header of the next height. Trust.Verify accepts it only if the signatures
// come from the validator set the caller trusts (the cluster's genesis),
// the header's app hash is AppHash(digest, stateRoot, root), and the batch's leaf is
// under root at the topic, partition and base offset claimed. After the
// chain changed its validator set, a header is accepted as CometBFT's
// light client accepts it (VerifyHeaderWith), and Client follows the
// changes by bisection from the trusted set (Client.Follow).
//
// The package imports nothing of Stele's internals, so other programs can
// use it; it depends on CometBFT's types and crypto only.
package proof

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/cometbft/cometbft/crypto/merkle"
	cmtmath "github.com/cometbft/cometbft/libs/math"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	"github.com/cometbft/cometbft/types"
)

// ErrUnproven is wrapped by every error of Verify: the batch must not be
// believed.
var ErrUnproven = errors.New("stele/proof: unproven batch")

// AppHashFormat is the version of what an app hash commits to. It is
// bumped with every change to anything hashed (the block digest's layout,
// the results' encoding, what housekeeping records), so a block hashed
// under one format can never be taken for one hashed under another; the
// state machine's golden test (internal/fsm) pins the hashes of each format.
// Format 3: results hash codes and structured fields only, never messages.
// Format 4: the app hash commits to the root of the authenticated state.
// Format 5: a trie leaf commits to 0x01 | value (TrieValue), so an empty
// value is proven present, not taken for absence; the ScheduleUpgrade
// command and the app version's state (u/...), which format-4 binaries
// refuse; and each table topic's keys' latest versions (TableKey).
// Format 6: CreateTopic and CreatePartitions carry manual replica
// assignments, and a topic's value (TopicKey) its partitions' assigned
// replicas.
// Format 7: a refused Produce's results list the indexes of its failing
// records (KIP-467's record_errors).
// Also in format 7: a KIP-848 group retargets when a subscribed topic is
// deleted (the epoch moves, members revoke its partitions), and resolves a
// regular expression subscription at the end of the block, not in the
// heartbeat that brought it (a group's value keeps its resolved regexes;
// the block digest records each resolution).
// Format 8: the state of an idempotent producer in a partition keeps,
// with each of its last batches, the timestamp the batch was stored with,
// which a retry on a LogAppendTime topic is answered with as
// log_append_time.
const AppHashFormat = 8

const (
	batchLeafDomain = "stele/batch/v1"
	appHashDomain   = "stele/apphash/v4"
)

// BatchLeaf is the leaf a batch appended at baseOffset to a partition of
// the topic (its name and id) contributes to its block's Merkle root:
//
//	sha256("stele/batch/v1" | u16 len(topic) | topic | id [16] | partition u32 | base offset u64 | batch)
func BatchLeaf(topic string, id [16]byte, partition int32, baseOffset int64, batch []byte) []byte {
	h := sha256.New()
	var b [2 + 4 + 8]byte
	h.Write([]byte(batchLeafDomain))
	binary.BigEndian.PutUint16(b[:2], uint16(len(topic)))
	h.Write(b[:2])
	h.Write([]byte(topic))
	h.Write(id[:])
	binary.BigEndian.PutUint32(b[2:6], uint32(partition))
	binary.BigEndian.PutUint64(b[6:], uint64(baseOffset))
	h.Write(b[2:])
	h.Write(batch)
	return h.Sum(nil)
}

// AppHash is the app hash of a block whose transactions, results and
// block-time changes hash to digest, after which the authenticated state
// (a sparse Merkle trie of every replicated key) has root stateRoot, and
// whose appended batches' leaves have Merkle root root:
//
//	sha256("stele/apphash/v4" | digest | stateRoot | root)
//
// digest and stateRoot are 32 bytes each; root is 32 bytes, or empty for a
// block that appended no batch (CometBFT's Merkle root of no leaves).
func AppHash(digest, stateRoot, root []byte) []byte {
	h := sha256.New()
	h.Write([]byte(appHashDomain))
	h.Write(digest)
	h.Write(stateRoot)
	h.Write(root)
	return h.Sum(nil)
}

// Batch is the proof of one stored batch, in the JSON the HTTP API serves.
type Batch struct {
	Topic      string `json:"topic"`
	TopicID    string `json:"topic_id"` // 32 hex digits
	Partition  int32  `json:"partition"`
	BaseOffset int64  `json:"base_offset"`
	LastOffset int64  `json:"last_offset"`
	// Batch is the RecordBatch v2 bytes as the partition log holds them
	// (and as Fetch returns them).
	Batch []byte `json:"batch"`
	// Height is the block that appended the batch; its app hash is in the
	// header of Height+1.
	Height int64  `json:"height"`
	Digest []byte `json:"digest"`
	// StateRoot is the root of the authenticated state after that block.
	StateRoot []byte        `json:"state_root"`
	Root      []byte        `json:"root"`
	Path      *merkle.Proof `json:"path"`
	// SignedHeader is the header of Height+1 and the commit that signed
	// it: a CometBFT SignedHeader, protobuf-encoded.
	SignedHeader []byte `json:"signed_header"`
	// Validators is the validator set that header names, when it is not
	// the genesis set (the chain removed a validator since): a CometBFT
	// ValidatorSet, protobuf-encoded (VerifyHeaderWith).
	Validators []byte `json:"validators,omitempty"`
}

// Trust is what a client believes without proof: the chain and its
// validator set.
type Trust struct {
	ChainID    string
	Validators *types.ValidatorSet

	// anchors are headers verified from Validators through the chain's
	// validator-set changes (Anchor, Client.Follow): a later header is
	// verified from them as from Validators.
	mu      sync.Mutex
	anchors []anchor
}

// anchor is a verified header's height, validator set and the hash of the
// set it names for the next height.
type anchor struct {
	height int64
	set    *types.ValidatorSet
	next   []byte
}

// notVouched is the error of a header whose validator set no trusted set
// vouches for: more than a third of the power of none of them signed it.
// Client.Follow bisects to such a header.
type notVouched struct {
	height int64
	err    error
}

func (e *notVouched) Error() string {
	return fmt.Sprintf("%v: the header at height %d names a validator set no trusted set vouches for (more than a third of the power of none of them signed it): %v", ErrUnproven, e.height, e.err)
}

func (e *notVouched) Unwrap() error { return ErrUnproven }

// TrustGenesis trusts the chain and validators of a genesis document (the
// cluster's config/genesis.json).
func TrustGenesis(doc *types.GenesisDoc) (*Trust, error) {
	if err := doc.ValidateAndComplete(); err != nil {
		return nil, fmt.Errorf("stele/proof: genesis: %w", err)
	}
	vals := make([]*types.Validator, 0, len(doc.Validators))
	for _, v := range doc.Validators {
		vals = append(vals, types.NewValidator(v.PubKey, v.Power))
	}
	set := types.NewValidatorSet(vals)
	if err := set.ValidateBasic(); err != nil {
		return nil, fmt.Errorf("stele/proof: genesis validators: %w", err)
	}
	return &Trust{ChainID: doc.ChainID, Validators: set}, nil
}

// TrustGenesisFile is TrustGenesis of the genesis document in path.
func TrustGenesisFile(path string) (*Trust, error) {
	doc, err := types.GenesisDocFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("stele/proof: %w", err)
	}
	return TrustGenesis(doc)
}

// Verified is a batch Verify accepted.
type Verified struct {
	Topic      string
	TopicID    [16]byte
	Partition  int32
	BaseOffset int64
	LastOffset int64
	Batch      []byte
	Height     int64  // the block that appended it
	HeaderHash []byte // the hash of the signed header of Height+1
	Time       int64  // that header's time, Unix milliseconds
	// Validators is how many validators that header's set has (the
	// trusted set's, or the set the chain changed it to).
	Validators int
}

func unproven(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnproven}, args...)...)
}

// Verify checks b against t: the signed header's commit carries more than
// two thirds of the trusted validators' voting power for the chain, its app
// hash is AppHash(b.Digest, b.StateRoot, b.Root), and the batch's leaf, at b's topic,
// partition and base offset, is under b.Root by b.Path. It also checks that
// the batch is one well-formed RecordBatch v2 whose CRC matches and whose
// base and last offsets are those claimed. A header naming a validator set
// other than the trusted one is checked as VerifyHeaderWith says.
func (t *Trust) Verify(b *Batch) (*Verified, error) {
	if b == nil || b.Path == nil {
		return nil, unproven("no proof")
	}
	id, err := hex.DecodeString(b.TopicID)
	if err != nil || len(id) != 16 {
		return nil, unproven("topic id %q is not 32 hex digits", b.TopicID)
	}
	base, last, err := checkBatch(b.Batch)
	if err != nil {
		return nil, unproven("%v", err)
	}
	if base != b.BaseOffset || last != b.LastOffset {
		return nil, unproven("the batch holds offsets %d-%d, the proof claims %d-%d", base, last, b.BaseOffset, b.LastOffset)
	}
	sh, set, err := t.verifyHeader(b.SignedHeader, b.Validators)
	if err != nil {
		return nil, err
	}
	if sh.Height != b.Height+1 {
		return nil, unproven("the signed header is of height %d, the batch's block is %d (its app hash is in the header of %d)", sh.Height, b.Height, b.Height+1)
	}
	if want := AppHash(b.Digest, b.StateRoot, b.Root); !bytes.Equal(sh.AppHash, want) {
		return nil, unproven("the signed app hash of height %d is %X, the proof gives %X", b.Height, []byte(sh.AppHash), want)
	}
	leaf := BatchLeaf(b.Topic, [16]byte(id), b.Partition, b.BaseOffset, b.Batch)
	if err := b.Path.Verify(b.Root, leaf); err != nil {
		return nil, unproven("the batch at %s-%d offset %d is not among height %d's batches: %v", b.Topic, b.Partition, b.BaseOffset, b.Height, err)
	}
	return &Verified{
		Topic: b.Topic, TopicID: [16]byte(id), Partition: b.Partition,
		BaseOffset: base, LastOffset: last, Batch: b.Batch,
		Height: b.Height, HeaderHash: sh.Hash(), Time: sh.Time.UnixMilli(), Validators: set.Size(),
	}, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// VerifyHeader decodes a protobuf-encoded CometBFT SignedHeader and checks
// that its commit carries more than two thirds of the trusted validators'
// voting power for the header, on the trusted chain.
func (t *Trust) VerifyHeader(b []byte) (*types.SignedHeader, error) {
	return t.VerifyHeaderWith(b, nil)
}

// VerifyHeaderWith is VerifyHeader for a header that may name a validator
// set other than the trusted one: the chain changed its set since
// (docs/cluster.md, "Membership"). vals is the set the header names, a
// protobuf-encoded CometBFT ValidatorSet (nil when it names the trusted
// set). The header is accepted, as CometBFT's light client skips to a
// header, when vals is the set the header names, its commit carries more
// than two thirds of that set's power, and validators of the trusted set
// (or of a header anchored since, Anchor) holding more than a third of
// its power signed it too: at least one honest trusted validator vouches
// for the new set; or when it is the height right after an anchored
// header that named its set as the next one. A header no trusted set
// vouches for is refused; Client.Follow fetches the intermediate headers
// that lead to it (bisection) and anchors them.
func (t *Trust) VerifyHeaderWith(b, vals []byte) (*types.SignedHeader, error) {
	sh, _, err := t.verifyHeader(b, vals)
	return sh, err
}

// verifyHeader is VerifyHeaderWith, also returning the set that signed.
func (t *Trust) verifyHeader(b, vals []byte) (*types.SignedHeader, *types.ValidatorSet, error) {
	var pb cmtproto.SignedHeader
	if err := pb.Unmarshal(b); err != nil {
		return nil, nil, unproven("signed header: %v", err)
	}
	sh, err := types.SignedHeaderFromProto(&pb)
	if err != nil {
		return nil, nil, unproven("signed header: %v", err)
	}
	if err := sh.ValidateBasic(t.ChainID); err != nil {
		return nil, nil, unproven("signed header: %v", err)
	}
	if bytes.Equal(sh.ValidatorsHash, t.Validators.Hash()) {
		if err := t.Validators.VerifyCommitLight(t.ChainID, sh.Commit.BlockID, sh.Height, sh.Commit); err != nil {
			return nil, nil, unproven("commit of height %d: %v", sh.Height, err)
		}
		return sh, t.Validators, nil
	}
	if len(vals) == 0 {
		return nil, nil, unproven("the header at height %d names validators %X, not the trusted set %X, and the proof carries no validator set", sh.Height, []byte(sh.ValidatorsHash), t.Validators.Hash())
	}
	var pv cmtproto.ValidatorSet
	if err := pv.Unmarshal(vals); err != nil {
		return nil, nil, unproven("validator set: %v", err)
	}
	set, err := types.ValidatorSetFromProto(&pv)
	if err != nil {
		return nil, nil, unproven("validator set: %v", err)
	}
	if !bytes.Equal(set.Hash(), sh.ValidatorsHash) {
		return nil, nil, unproven("the validator set given hashes to %X, the header at height %d names %X", set.Hash(), sh.Height, []byte(sh.ValidatorsHash))
	}
	if err := set.VerifyCommitLight(t.ChainID, sh.Commit.BlockID, sh.Height, sh.Commit); err != nil {
		return nil, nil, unproven("commit of height %d by its validator set: %v", sh.Height, err)
	}
	if err := t.vouched(sh); err != nil {
		return nil, nil, err
	}
	return sh, set, nil
}

// vouched checks that a trusted set vouches for sh, whose own set signed
// it: the genesis set or an anchored header's set signed it with more than
// a third of its power, or sh is the height after an anchored header that
// named sh's set as the next.
func (t *Trust) vouched(sh *types.SignedHeader) error {
	third := cmtmath.Fraction{Numerator: 1, Denominator: 3}
	err := t.Validators.VerifyCommitLightTrusting(t.ChainID, sh.Commit, third)
	if err == nil {
		return nil
	}
	t.mu.Lock()
	anchors := t.anchors
	t.mu.Unlock()
	for _, a := range anchors {
		if a.height+1 == sh.Height && bytes.Equal(a.next, sh.ValidatorsHash) {
			return nil
		}
		if a.height < sh.Height && a.set.VerifyCommitLightTrusting(t.ChainID, sh.Commit, third) == nil {
			return nil
		}
	}
	return &notVouched{height: sh.Height, err: err}
}

// Anchor verifies a signed header and the set it names (as
// VerifyHeaderWith) and trusts that set from then on: later headers it
// vouches for verify too, as CometBFT's light client moves its trusted
// header forward. Only a header that verifies is anchored. Safe for
// concurrent use.
func (t *Trust) Anchor(b, vals []byte) error {
	sh, set, err := t.verifyHeader(b, vals)
	if err != nil {
		return err
	}
	if set == t.Validators {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.anchors {
		if a.height == sh.Height {
			return nil
		}
	}
	t.anchors = append(t.anchors, anchor{height: sh.Height, set: set, next: append([]byte(nil), sh.NextValidatorsHash...)})
	return nil
}

// unvouchedHeight reports the height of the header err says no trusted
// set vouches for.
func unvouchedHeight(err error) (int64, bool) {
	var nv *notVouched
	if errors.As(err, &nv) {
		return nv.height, true
	}
	return 0, false
}

// checkBatch checks that b is exactly one RecordBatch v2 with a valid CRC
// and returns its base and last offsets.
func checkBatch(b []byte) (base, last int64, err error) {
	const headerLen = 61
	if len(b) < headerLen {
		return 0, 0, fmt.Errorf("batch of %d bytes is shorter than a RecordBatch header", len(b))
	}
	if n := int64(int32(binary.BigEndian.Uint32(b[8:12]))) + 12; n != int64(len(b)) {
		return 0, 0, fmt.Errorf("batch length field says %d bytes, the batch has %d", n, len(b))
	}
	if b[16] != 2 {
		return 0, 0, fmt.Errorf("batch magic %d, want 2", b[16])
	}
	if crc := crc32.Checksum(b[21:], castagnoli); crc != binary.BigEndian.Uint32(b[17:21]) {
		return 0, 0, errors.New("batch CRC does not match")
	}
	base = int64(binary.BigEndian.Uint64(b[0:8]))
	return base, base + int64(int32(binary.BigEndian.Uint32(b[23:27]))), nil
}
