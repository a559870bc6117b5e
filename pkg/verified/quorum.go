package verified

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrDisagree: the brokers of a Quorum returned different bytes for the
// same offsets: at least one of them lies.
var ErrDisagree = errors.New("stele/verified: brokers disagree")

// Quorum reads one partition through several brokers and hands over only
// the batches every one of them returned byte for byte. With f+1 brokers
// of a cluster of 3f+1 at least one is honest, so what they all return is
// what the cluster committed: a check without proofs, for clients that
// hold no trusted genesis, at the cost of reading everything f+1 times.
// Like Reader, it cannot tell a broker that withholds (answers less) from
// one that is behind: it hands over only what all of them have.
type Quorum struct {
	Brokers []*kgo.Broker
	// Names name the brokers in errors (e.g. their addresses; default
	// "broker i").
	Names     []string
	Topic     string
	Partition int32
	// Next is the next offset to read; Poll moves it past what it returns.
	Next int64
	// MaxWaitMs is how long each Fetch waits for new records (0: 500).
	MaxWaitMs int32
}

// QuorumBatch is a batch every broker of a Quorum returned.
type QuorumBatch struct {
	Batch      []byte
	BaseOffset int64
	LastOffset int64
}

// Poll fetches from Next through every broker at once and returns the
// batches all of them returned identically, from Next on, up to where the
// shortest answer ends; Next moves past them. Different bytes for one
// offset give ErrDisagree naming the brokers.
func (q *Quorum) Poll(ctx context.Context) ([]QuorumBatch, error) {
	if len(q.Brokers) == 0 {
		return nil, errors.New("stele/verified: a quorum of no broker")
	}
	wait := q.MaxWaitMs
	if wait == 0 {
		wait = 500
	}
	answers := make([][][]byte, len(q.Brokers))
	errs := make([]error, len(q.Brokers))
	var wg sync.WaitGroup
	for i, b := range q.Brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], _, errs[i] = Fetch(ctx, b, q.Topic, q.Partition, q.Next, wait)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Each broker's batches from Next on, by base offset.
	byBroker := make([][]QuorumBatch, len(q.Brokers))
	for i, bs := range answers {
		for _, b := range bs {
			if len(b) < 61 {
				return nil, fmt.Errorf("%w: broker %s returned a batch of %d bytes", ErrDisagree, q.name(i), len(b))
			}
			base := int64(binary.BigEndian.Uint64(b))
			last := base + int64(int32(binary.BigEndian.Uint32(b[23:27])))
			if last < q.Next {
				continue
			}
			byBroker[i] = append(byBroker[i], QuorumBatch{Batch: b, BaseOffset: base, LastOffset: last})
		}
	}
	n := len(byBroker[0])
	for _, bs := range byBroker[1:] {
		n = min(n, len(bs))
	}
	out := make([]QuorumBatch, 0, n)
	for k := 0; k < n; k++ {
		first := byBroker[0][k]
		for i, bs := range byBroker[1:] {
			if !bytes.Equal(bs[k].Batch, first.Batch) {
				return out, fmt.Errorf("%w: %s-%d: brokers %s and %s returned different batches at offset %d and %d",
					ErrDisagree, q.Topic, q.Partition, q.name(0), q.name(i+1), first.BaseOffset, bs[k].BaseOffset)
			}
		}
		out = append(out, first)
		q.Next = first.LastOffset + 1
	}
	return out, nil
}

func (q *Quorum) name(i int) string {
	if i < len(q.Names) {
		return q.Names[i]
	}
	return fmt.Sprintf("broker %d", i)
}
