package kafka

import (
	"bytes"
	"context"
	"hash/fnv"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/stele-io/stele/internal/fsm"
)

// BrokerInfo is one broker of the cluster's directory (the genesis lists
// them): its Kafka node id, where clients reach it, and its validator.
type BrokerInfo struct {
	NodeID    int32
	Host      string
	Port      int32
	Validator []byte
	// Rack is the broker's rack (Kafka's broker.rack), from the chain's
	// directory: consumers that name it read from the broker (KIP-392,
	// readReplica).
	Rack string
}

// defaultLiveWindow is how recently (in block time) a broker's validator
// must have signed a block, or a replica have said it is caught up, for
// the broker to lead partitions.
const defaultLiveWindow = 10 * time.Second

// Signing reports whether a broker whose last signature (a commit's, or a
// replica's statement, fsm/cluster's alive.go) came with the block of
// time lastMs (ms) is signing at block time nowMs: within
// LiveWindow, the rule by which Metadata makes its broker a partition
// leader (members), and what GET /v1/cluster calls signing.
func (s *Server) Signing(lastMs, nowMs int64) bool {
	return nowMs-lastMs <= s.opts.LiveWindow.Milliseconds()
}

// advertised is the address to answer for broker b on c's listener: this
// broker's address on that listener for a node without a directory (a
// single node may serve several listeners), else b's directory address
// (a node of a cluster serves the one listener the directory names).
func (c *conn) advertised(b BrokerInfo) (string, int32) {
	if len(c.s.opts.Brokers) == 0 && b.NodeID == c.s.opts.NodeID && c.l != nil {
		return c.l.AdvertisedHost, c.l.AdvertisedPort
	}
	if b.Host == "" && b.NodeID == c.s.opts.NodeID {
		return c.s.Addr()
	}
	return b.Host, b.Port
}

// members returns every broker of the cluster (the directory's, less those
// the chain removed) and those alive now: brokers whose key the chain has
// not taken out (voted out for misbehavior, rotated out) and that signed
// within LiveWindow of the last committed block time: a validator's commit
// signature, or a replica's statement that it is caught up (fsm/cluster's
// alive.go), so a replica that keeps up leads partitions as a validator
// does. Both come from the chain, so every broker answers alike. A
// node without a directory (a single node) is the whole cluster and alive.
// When the chain shows nobody alive (no commit signatures seen yet), every
// broker counts as alive.
func (s *Server) members() (all, live []BrokerInfo) {
	if len(s.opts.Brokers) == 0 {
		host, port := s.Addr()
		self := []BrokerInfo{{NodeID: s.opts.NodeID, Host: host, Port: port}}
		return self, self
	}
	all = s.directory()
	if removed := s.b.Removed(); len(removed) > 0 {
		dir := all
		all = nil
		for _, b := range dir {
			if len(b.Validator) != 20 || !removed[[20]byte(b.Validator)] { // taken out of the cluster: clients move on
				all = append(all, b)
			}
		}
	}
	if byzantineMetadata() {
		for _, b := range all {
			if b.NodeID == s.opts.NodeID {
				self := []BrokerInfo{b}
				return self, self
			}
		}
	}
	signers, now := s.b.Liveness()
	vs := s.b.Validators()
	recs := s.b.Members().Records // by address
	for _, b := range all {
		// A replica (not in the validator set) is alive by what it
		// signed after the block that made it one (its statements, and
		// the commits CometBFT still has it sign for two heights), not
		// by what it signed as a validator: a broker demoted for downtime
		// leads nothing from that block, one voted out or removed never
		// again, and one demoted while it signs goes on leading as a
		// replica that keeps up.
		since := int64(-1)
		if vs != nil && len(b.Validator) == 20 {
			if _, ok := vs.Lookup([20]byte(b.Validator)); !ok {
				i, found := slices.BinarySearchFunc(recs, [20]byte(b.Validator), func(r fsm.ValidatorRecord, a [20]byte) int { return bytes.Compare(r.Address[:], a[:]) })
				if !found || recs[i].Reason.Final() {
					continue
				}
				since = recs[i].ChangedAtMs
			}
		}
		for _, sg := range signers {
			if bytes.Equal(sg.Address, b.Validator) && sg.LastTimeMs > since && s.Signing(sg.LastTimeMs, now) {
				live = append(live, b)
				break
			}
		}
	}
	if len(live) == 0 {
		live = all
	}
	return all, live
}

// directory is the genesis directory (each broker with the key and
// addresses the chain's entry for its node id names, once its key was
// rotated) followed by the brokers the chain added (fsm/cluster's
// directory.go), as of the last commit: derived once per change of the
// membership, read by every Metadata request.
func (s *Server) directory() []BrokerInfo {
	m := s.b.Members()
	if d := s.dir.Load(); d != nil && d.members == m {
		return d.brokers
	}
	out := s.opts.Brokers
	for _, e := range m.Directory {
		if e.PubKey == nil {
			continue // a genesis broker as the genesis left it: opts.Brokers has it
		}
		host, port, err := net.SplitHostPort(e.Kafka)
		p, perr := strconv.Atoi(port)
		if err != nil || perr != nil {
			continue // not reachable: the state machine checked it
		}
		b := BrokerInfo{NodeID: e.NodeID, Host: host, Port: int32(p), Validator: append([]byte(nil), e.Validator[:]...), Rack: e.Rack}
		if len(out) == len(s.opts.Brokers) {
			out = append([]BrokerInfo(nil), s.opts.Brokers...) // a copy to change
		}
		if i := slices.IndexFunc(out, func(o BrokerInfo) bool { return o.NodeID == e.NodeID }); i >= 0 {
			out[i] = b // its key rotated
		} else {
			out = append(out, b)
		}
	}
	s.dir.Store(&directoryView{members: m, brokers: out})
	return out
}

// directoryView is the directory derived from one membership.
type directoryView struct {
	members *fsm.Members
	brokers []BrokerInfo
}

// readReplicas returns, for a consumer in rack, which broker to read
// each partition from (KIP-392's preferred read replica): when this
// broker is not in that rack and brokers of the directory are, one of
// them, spread over partitions as leaders are, so the consumer's reads
// go to its rack (read replicas added with stele cluster add --rack);
// nil when the consumer should read here. Every broker holds every
// partition, and one that is behind refuses reads
// (NOT_LEADER_OR_FOLLOWER), which sends the consumer back to the leader.
func (s *Server) readReplicas(rack string) func(topic string, partition int32) int32 {
	if rack == "" || len(s.opts.Brokers) == 0 {
		return nil
	}
	all, _ := s.members()
	var inRack []BrokerInfo
	for _, b := range all {
		if b.Rack != rack {
			continue
		}
		if b.NodeID == s.opts.NodeID {
			return nil
		}
		inRack = append(inRack, b)
	}
	if len(inRack) == 0 {
		return nil
	}
	return func(topic string, partition int32) int32 { return leader(inRack, topic, partition) }
}

// leader names the partition's leader among the live brokers: spread by
// topic and partition so that clients spread their load, and the same on
// every broker for the same chain.
func leader(live []BrokerInfo, topic string, partition int32) int32 {
	h := fnv.New32a()
	h.Write([]byte(topic))
	i := (uint64(h.Sum32()) + uint64(uint32(partition))) % uint64(len(live))
	return live[i].NodeID
}

func nodeIDs(bs []BrokerInfo) []int32 {
	ids := make([]int32, len(bs))
	for i, b := range bs {
		ids[i] = b.NodeID
	}
	return ids
}

// catchingUp reports whether reads must be refused because this broker is
// behind the chain.
func (s *Server) catchingUp() bool { return s.opts.CatchingUp != nil && s.opts.CatchingUp() }

// fatal reports a fault after which this broker must stop serving.
func (s *Server) fatal(err error) {
	s.opts.Logger.Error("stopping: this broker cannot serve correctly", "err", err)
	if s.opts.Fatal != nil {
		s.opts.Fatal(err)
	}
}

// maxBarrierWait bounds how long a read waits to learn that this broker is
// current before it answers NOT_LEADER_OR_FOLLOWER.
const maxBarrierWait = 5 * time.Second

// current reports whether this broker has applied a block ordered after
// the call began (always true without a Barrier: a single validator is
// never behind), waiting at most wait. A broker cut off from the others, or
// just restarted and not yet told how far the chain has gone, holds a log
// that may end below what other brokers have acknowledged, without knowing
// it; what it would answer from that log about its end (OFFSET_OUT_OF_RANGE
// for an offset a client has already read elsewhere, a lower end offset)
// makes clients rewind.
func (c *conn) current(wait time.Duration) bool {
	if c.s.opts.Barrier == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(c.ctx, min(max(wait, time.Second), maxBarrierWait))
	defer cancel()
	defer c.waitedSince(time.Now())
	if err := c.s.opts.Barrier(ctx); err != nil {
		c.s.metrics.barriers.WithLabelValues("failed").Inc()
		c.s.opts.Logger.Debug("read barrier failed: answering as a broker that may be behind", "err", err)
		return false
	}
	c.s.metrics.barriers.WithLabelValues("ok").Inc()
	return true
}
