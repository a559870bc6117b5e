package kafka

import (
	"bytes"
	"context"
	"hash/fnv"
	"time"
)

// BrokerInfo is one broker of the cluster's directory (the genesis lists
// them): its Kafka node id, where clients reach it, and its validator.
type BrokerInfo struct {
	NodeID    int32
	Host      string
	Port      int32
	Validator []byte
}

// defaultLiveWindow is how recently (in block time) a broker's validator
// must have signed a block for the broker to lead partitions.
const defaultLiveWindow = 10 * time.Second

// Signing reports whether a validator whose signature is last in the
// commit of block time lastMs (ms) is signing at block time nowMs: within
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
// the chain removed) and those alive now: brokers
// whose validator is in the committed validator set (not voted out) and
// signed a block within LiveWindow of the last committed block time. Both come from the chain, so every broker answers alike. A
// node without a directory (a single node) is the whole cluster and alive.
// When the chain shows nobody alive (no commit signatures seen yet), every
// broker counts as alive.
func (s *Server) members() (all, live []BrokerInfo) {
	if len(s.opts.Brokers) == 0 {
		host, port := s.Addr()
		self := []BrokerInfo{{NodeID: s.opts.NodeID, Host: host, Port: port}}
		return self, self
	}
	all = s.opts.Brokers
	if removed := s.b.Removed(); len(removed) > 0 {
		all = nil
		for _, b := range s.opts.Brokers {
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
	for _, b := range all {
		if vs != nil && len(b.Validator) == 20 {
			if _, ok := vs.Lookup([20]byte(b.Validator)); !ok {
				continue // voted out: it leads nothing from the block that removed it
			}
		}
		for _, sg := range signers {
			if bytes.Equal(sg.Address, b.Validator) && s.Signing(sg.LastTimeMs, now) {
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
