package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/stele-io/stele/internal/fsm"
)

// ClusterStatus is the body of GET /v1/cluster.
type ClusterStatus struct {
	NodeID    int32     `json:"node_id"`
	ChainID   string    `json:"chain_id"`
	Height    int64     `json:"height"`
	AppHash   string    `json:"app_hash"`
	BlockTime time.Time `json:"block_time"`
	// AppVersion is the app version the chain runs, MaxAppVersion the
	// highest this broker's binary runs; Upgrade the scheduled upgrade
	// (GET /v1/cluster/upgrade has the votes too).
	AppVersion    uint32           `json:"app_version"`
	MaxAppVersion uint32           `json:"max_app_version"`
	Upgrade       *fsm.UpgradePlan `json:"upgrade,omitempty"`
	Validators    []ValidatorView  `json:"validators"`
	Peers         []PeerView       `json:"peers"`
}

// ValidatorView is one validator: who it is, which broker, and what the
// chain says about its liveness.
type ValidatorView struct {
	Address string `json:"address"`
	PubKey  string `json:"pub_key"`
	Power   int64  `json:"power"`
	Name    string `json:"name"`
	// NodeID and Kafka come from the broker directory, the genesis's and
	// the brokers the chain added (absent for a single node started
	// without one).
	NodeID *int32 `json:"node_id,omitempty"`
	Kafka  string `json:"kafka,omitempty"`
	// LastSignedHeight is the last height whose block this validator's
	// signature is in the chain for (0: none seen); LastSignedTime the block
	// time of the commit that carried it. A replica's are those of its
	// last statement that it is caught up (from app version 10): the
	// height it said it had applied, and the time of the block that
	// ordered the statement.
	LastSignedHeight int64      `json:"last_signed_height"`
	LastSignedTime   *time.Time `json:"last_signed_time,omitempty"`
	// Height is the broker's last committed height: the answering
	// broker's own, another's as its /healthz reported it within a second
	// (absent when it did not answer: down, cut off, or a key no broker
	// of the directory holds). A replica signs no commit, so this is how
	// far it has caught up (besides its statements); a broker reports
	// its own height, so a Byzantine one may lie about it.
	Height *int64 `json:"height,omitempty"`
	// Role is what the broker is to the chain: "validator" (a voting
	// member), "replica" (demoted: it follows and serves reads) or
	// "removed" (taken out, voted out, or a key its broker replaced;
	// Removed says why); a broker just added is a
	// replica until promoted. Signing says whether its
	// signature is in a commit, or for a replica its statement that it
	// is caught up in a block (either after the block that made it a
	// replica), within
	// the live window (10 s of block time) of the last block: the rule
	// by which Metadata makes a broker a partition leader.
	Role    string `json:"role"`
	Signing bool   `json:"signing"`
	// Removed says why the chain took the validator's power away (role
	// "removed"): committed evidence of misbehavior, from app version 7.
	Removed *RemovalView `json:"removed,omitempty"`
	// Demoted says why and when a replica lost its power: "vote" (stele
	// cluster demote) or "downtime" (stele.validator.downtime.ms).
	Demoted *RemovalView `json:"demoted,omitempty"`
	// AddedAt is the height of the membership change that added the
	// broker to the cluster (stele cluster add); absent for a genesis
	// broker.
	AddedAt int64 `json:"added_at,omitempty"`
	// KeyRotatedAt is the height of the membership change that last
	// replaced the broker's key (stele cluster rotate-key); absent when
	// never. Its old key is listed as "removed" for "key-rotated", with
	// no node id.
	KeyRotatedAt int64 `json:"key_rotated_at,omitempty"`
	// HTTP is the broker's HTTP API address as the directory lists it
	// (absent for a single node without a directory).
	HTTP string `json:"http,omitempty"`
	// Rack is the broker's rack (stele cluster add --rack), if any.
	Rack string `json:"rack,omitempty"`
}

// RemovalView is why and when a validator lost its power.
type RemovalView struct {
	// Reason is the evidence's kind ("duplicate-vote" or
	// "light-client-attack") for a validator voted out, "removed" for one
	// taken out of the cluster, "key-rotated" for a key its broker
	// replaced, "vote" or "downtime" for a demoted one.
	Reason string `json:"reason"`
	// Height is the block that removed it; EvidenceHeight the height of
	// the misbehavior that block proved.
	Height         int64 `json:"height"`
	EvidenceHeight int64 `json:"evidence_height,omitempty"`
}

// RoleValidator is a broker that votes; RoleReplica one the validators
// demoted (power 0: it follows the chain and serves reads, and votes on
// nothing, until promoted); RoleRemoved one taken out of the cluster,
// voted out for misbehavior, or a key its broker replaced (stele cluster
// rotate-key): its key is never promoted again.
const (
	RoleValidator = "validator"
	RoleReplica   = "replica"
	RoleRemoved   = "removed"
)

// PeerView is one connected CometBFT peer.
type PeerView struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	Outbound bool   `json:"outbound"`
	Height   int64  `json:"height"`
}

func serveCluster(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if opts.Cluster == nil {
			http.Error(w, "cluster status is not available on this broker", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(opts.Cluster())
	}
}
