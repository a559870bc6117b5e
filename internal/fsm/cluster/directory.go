package cluster

// The broker directory (docs/cluster.md, "Adding a broker"): which Kafka
// node id each validator key is and where clients and peers reach it. The
// genesis lists the first brokers (ClusterOptions.Brokers, the genesis
// app_state's); from app version 8 (DirectoryVersion) a membership change
// may add one (MembershipChange.Broker, `stele cluster add`), signed as
// every membership change is: by validators holding more than two thirds
// of the power, or by the cluster administrator. The new broker joins as
// a replica (power 0, ReasonAdded): it follows the chain and serves reads,
// and `stele cluster promote` makes it a validator like any replica. Its
// node id and key must be new to the chain: a node id or a key the
// directory or the validator records already name (a removed broker's
// included) is refused.
//
// From app version 9 (RotationVersion) a membership change may replace a
// broker's validator key (`stele cluster rotate-key`): the change names
// the broker's current key (Validator) and carries its directory entry
// with the new key (Broker, the same node id). The new key must be new to
// the chain; it takes the old key's power, and the old key is out for good
// (ReasonRotatedOut). The directory entry of the node id then names the
// new key (RotatedAt), a genesis broker's included. CometBFT counts the
// new key two heights later; the broker signs with it from then on
// (internal/consensus/cometbft's rotation.go). The guard weighs the new
// key as not signing yet: a rotation is refused while the validators
// signing without the rotated one would not keep a quorum.
//
// Every broker reads the directory from the state, so Metadata,
// FindCoordinator, the data plane's peers and GET /v1/cluster follow a
// change at once, alike on every broker.
//
// State, authenticated (one leaf per broker the chain added):
//
//	u/broker/<node id, 4 bytes big-endian>   its key, Kafka and HTTP
//	                                         addresses, rack, the height
//	                                         that added it (0: a genesis
//	                                         broker) and the one that last
//	                                         rotated its key (absent: none)

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"sort"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm/core"
	"github.com/stele-io/stele/internal/fsm/trust"
)

// DirectoryVersion is the app version from which a membership change may
// add a broker to the directory.
const DirectoryVersion = 8

// RotationVersion is the app version from which a membership change may
// replace a broker's key.
const RotationVersion = 9

// maxBrokerAddress bounds a directory address (host:port).
const maxBrokerAddress = 255

var brokerPfx = []byte("u/broker/")

// BrokerEntry is what a membership change adding a broker says of it: its
// Kafka node id, its validator key, the addresses (host:port) clients
// reach its Kafka listener at and peers its HTTP API at, and its rack
// (Kafka's broker.rack, empty for none): consumers that name the rack
// read from it (KIP-392, internal/kafka's fetch).
type BrokerEntry struct {
	NodeID int32
	PubKey [ed25519.PublicKeySize]byte
	Kafka  string
	HTTP   string
	Rack   string
}

// IsZero reports whether e names no broker (a change that adds none).
func (e BrokerEntry) IsZero() bool { return e == BrokerEntry{} }

// Address is the validator address of e's key, as CometBFT derives it.
func (e BrokerEntry) Address() [20]byte { return ValidatorAddress(e.PubKey[:]) }

// ValidatorAddress is CometBFT's address of an ed25519 key: the first 20
// bytes of its SHA-256.
func ValidatorAddress(pub []byte) [20]byte {
	s := sha256.Sum256(pub)
	return [20]byte(s[:20])
}

// DirectoryBroker is one broker of the directory: a genesis one (AddedAt
// 0) or one the chain added; RotatedAt is the height of the change that
// last replaced its key (0: never).
type DirectoryBroker struct {
	NodeID    int32
	Validator [20]byte
	Kafka     string
	HTTP      string
	Rack      string
	// PubKey is the validator key of an added broker or of one whose key
	// was rotated (nil for a genesis one as the genesis left it: the
	// genesis validator set holds it).
	PubKey    ed25519.PublicKey
	AddedAt   int64
	RotatedAt int64
}

// IsRotation reports whether ch replaces a broker's key: it carries a
// broker entry whose key is not the validator it names.
func IsRotation(ch MembershipChange) bool {
	return !ch.Broker.IsZero() && ch.Broker.Address() != ch.Validator
}

// checkBrokerEntry is the stateless check of a change that adds e.
func checkBrokerEntry(ch MembershipChange) core.Result {
	e := ch.Broker
	switch {
	case e.NodeID < 0:
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("a broker's node id is not negative, got %d", e.NodeID))
	case ch.Power != 0 || ch.Remove:
		if IsRotation(ch) {
			return core.Fail(kerr.InvalidRequest.Code, "a rotated key takes the old key's power: the change gives power 0 and removes nothing")
		}
		return core.Fail(kerr.InvalidRequest.Code, "a broker joins as a replica (power 0): promote it once it has caught up")
	}
	if len(e.Rack) > maxBrokerAddress {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("the new broker's rack is longer than %d bytes", maxBrokerAddress))
	}
	for _, a := range []struct{ name, v string }{{"Kafka", e.Kafka}, {"HTTP", e.HTTP}} {
		if err := checkHostPort(a.v); err != nil {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("the new broker's %s address %q: %v", a.name, a.v, err))
		}
	}
	return core.Result{}
}

// checkHostPort accepts host:port with a host and a port in 1-65535.
func checkHostPort(s string) error {
	if len(s) > maxBrokerAddress {
		return fmt.Errorf("longer than %d bytes", maxBrokerAddress)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("not host:port")
	}
	p, err := strconv.Atoi(port)
	if host == "" || err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("want a host and a port in 1-65535")
	}
	return nil
}

// addBroker checks that the change's broker is new to the chain (its node
// id and its key), and records it with its key as a replica.
func (f *Cluster) addBroker(ch MembershipChange) core.Result {
	e := ch.Broker
	if f.Version < DirectoryVersion {
		return core.Fail(kerr.UnsupportedVersion.Code, fmt.Sprintf("adding a broker needs app version %d; this chain runs %d (stele cluster upgrade)", DirectoryVersion, f.Version))
	}
	if b, ok := f.brokerByID(e.NodeID); ok {
		if b.AddedAt == 0 {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("node id %d is a broker of the genesis already: give the new broker another id", e.NodeID))
		}
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("node id %d was added at height %d already: give the new broker another id", e.NodeID, b.AddedAt))
	}
	return f.newKey(ch.Validator, "a new broker")
}

// newKey refuses a key the chain has known: one it has a record of (a
// removed or rotated one included) or a genesis validator's.
func (f *Cluster) newKey(addr [20]byte, who string) core.Result {
	if r, ok := f.validatorRecs[addr]; ok {
		return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("validator %X is known to the chain already (%s at height %d): %s needs a new key", addr, r.Reason, r.ChangedAt, who))
	}
	if f.opts.Validators != nil {
		if _, ok := f.opts.Validators.Lookup(addr); ok {
			return core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("validator %X is a genesis validator: %s needs a new key", addr, who))
		}
	}
	return core.Result{}
}

// brokerByID is the directory's broker with node id id: the chain's entry
// (added, or rotated), else the genesis one.
func (f *Cluster) brokerByID(id int32) (DirectoryBroker, bool) {
	if b, ok := f.addedBrokers[id]; ok {
		return b, true
	}
	for _, b := range f.opts.Brokers {
		if b.NodeID == id {
			return b, true
		}
	}
	return DirectoryBroker{}, false
}

// rotationTarget checks a change that replaces a broker's key: from app
// version 9, naming a broker of the directory by its node id and its
// current key, with a key new to the chain. It returns the broker's
// entry as it is.
func (f *Cluster) rotationTarget(ch MembershipChange) (DirectoryBroker, core.Result) {
	e := ch.Broker
	b, ok := f.brokerByID(e.NodeID)
	if !ok {
		return b, core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("node id %d is no broker of this chain: a key rotation names a broker of the directory (stele cluster status lists them)", e.NodeID))
	}
	if b.Validator != ch.Validator {
		return b, core.Fail(kerr.InvalidRequest.Code, fmt.Sprintf("broker %d's key is %X's, and the rotation names %X: sign it again for the current key", e.NodeID, b.Validator, ch.Validator))
	}
	return b, f.newKey(e.Address(), "a rotated broker")
}

// recordBroker writes the directory entry of an added broker, or of one
// whose key was rotated (after the votes and guards let the change
// through).
func (f *Cluster) recordBroker(b DirectoryBroker) {
	if f.addedBrokers == nil {
		f.addedBrokers = map[int32]DirectoryBroker{}
	}
	if f.brokersDirty == nil {
		f.brokersDirty = map[int32]bool{}
	}
	f.addedBrokers[b.NodeID] = b
	f.brokersDirty[b.NodeID] = true
	f.membersNew = true
}

// entryOf is the directory entry e makes, with key and addresses from the
// change.
func entryOf(e BrokerEntry) DirectoryBroker {
	return DirectoryBroker{NodeID: e.NodeID, Validator: e.Address(), Kafka: e.Kafka, HTTP: e.HTTP, Rack: e.Rack,
		PubKey: append(ed25519.PublicKey(nil), e.PubKey[:]...)}
}

func brokerKey(id int32) []byte {
	return binary.BigEndian.AppendUint32(append([]byte(nil), brokerPfx...), uint32(id))
}

func encodeDirectoryBroker(b DirectoryBroker) []byte {
	w := &core.Writer{}
	w.U8(core.PersistVersion)
	w.Bytes(b.PubKey)
	w.Str(b.Kafka)
	w.Str(b.HTTP)
	w.Str(b.Rack)
	w.I64(b.AddedAt)
	if b.RotatedAt != 0 {
		w.I64(b.RotatedAt) // from app version 9: absent before
	}
	return w.B
}

func decodeDirectoryBroker(id int32, v []byte) (DirectoryBroker, error) {
	r := &core.Reader{B: v}
	if ver := r.U8(); r.E == nil && ver != core.PersistVersion {
		r.Fail("directory entry format %d", ver)
	}
	b := DirectoryBroker{NodeID: id, PubKey: append(ed25519.PublicKey(nil), r.Bytes()...), Kafka: r.Str(), HTTP: r.Str(), Rack: r.Str(), AddedAt: r.I64()}
	if r.E == nil && len(r.B) > 0 {
		b.RotatedAt = r.I64()
	}
	if r.E == nil && len(b.PubKey) != ed25519.PublicKeySize {
		r.Fail("broker %d: a key of %d bytes", id, len(b.PubKey))
	}
	if err := r.Done(); err != nil {
		return b, err
	}
	b.Validator = ValidatorAddress(b.PubKey)
	return b, nil
}

// loadDirectory reads the added brokers.
func (f *Cluster) loadDirectory() error {
	f.addedBrokers, f.brokersDirty = map[int32]DirectoryBroker{}, map[int32]bool{}
	return f.Store.Scan(brokerPfx, func(k, v []byte) error {
		if len(k) != len(brokerPfx)+4 {
			return fmt.Errorf("stele/fsm: bad directory key %x", k)
		}
		id := int32(binary.BigEndian.Uint32(k[len(brokerPfx):]))
		b, err := decodeDirectoryBroker(id, v)
		if err != nil {
			return fmt.Errorf("stele/fsm: reading directory entry %d: %w", id, err)
		}
		f.addedBrokers[id] = b
		return nil
	})
}

// persistDirectory writes the entries the block added, by node id.
func (f *Cluster) persistDirectory(b *core.StateBatch) {
	if len(f.brokersDirty) == 0 {
		return
	}
	ids := make([]int32, 0, len(f.brokersDirty))
	for id := range f.brokersDirty {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		b.Set(brokerKey(id), encodeDirectoryBroker(f.addedBrokers[id]))
	}
	clear(f.brokersDirty)
}

// directory is the genesis directory (each broker as the chain's entry for
// its node id has it, when its key was rotated) followed by the added
// brokers, by node id.
func (f *Cluster) directory() []DirectoryBroker {
	out := append([]DirectoryBroker(nil), f.opts.Brokers...)
	for i, b := range out {
		if e, ok := f.addedBrokers[b.NodeID]; ok {
			out[i] = e
		}
	}
	added := make([]DirectoryBroker, 0, len(f.addedBrokers))
	for _, b := range f.addedBrokers {
		if b.AddedAt > 0 {
			added = append(added, b)
		}
	}
	sort.Slice(added, func(i, j int) bool { return added[i].NodeID < added[j].NodeID })
	return append(out, added...)
}

// Directory returns the broker directory as of the last commit: the
// genesis brokers (with their rotated keys), then those the chain added,
// by node id. Safe for concurrent use.
func (f *Cluster) Directory() []DirectoryBroker {
	return append([]DirectoryBroker(nil), f.Members().Directory...)
}

// knownSigners reports whether every signature of c is a good one by a
// key the chain has had as a validator: a genesis validator's, or one it
// has a record of (promoted, demoted, removed or voted out); from app
// version 8 (trust.KnownSigners). Such a certificate, refused by the set
// of now, was made just before a change: its submitter certifies it
// again.
func (f *Cluster) knownSigners(c trust.Certificate) bool {
	if f.Version < DirectoryVersion || len(c.Sigs) == 0 {
		return false
	}
	stmt := c.Statement()
	for _, s := range c.Sigs {
		var key ed25519.PublicKey
		if r, ok := f.validatorRecs[s.Validator]; ok {
			key = r.PubKey
		} else if f.opts.Validators != nil {
			if v, ok := f.opts.Validators.Lookup(s.Validator); ok {
				key = v.PubKey
			}
		}
		if key == nil || !ed25519.Verify(key, stmt, s.Signature[:]) {
			return false
		}
	}
	return true
}
