// Package verified reads a partition through any Stele broker over the
// Kafka protocol and believes nothing it has not proven: every batch the
// broker returns must be the batch the cluster committed at its offset
// (pkg/proof), consecutive batches must leave no offset out, and a high
// watermark is believed only once the partition's offsets in the signed
// state prove it (or a later one, with the record just below it proven).
//
// A Byzantine broker that alters a record, leaves a batch out, reorders
// records or claims a high watermark above its log is caught by the first
// read that meets the lie; the Reader then fails with an error wrapping
// proof.ErrUnproven (or ErrGap, ErrForgedWatermark), and the records of
// the offending batch are not returned. A high watermark claimed below one
// the signed state proved before is refused too. What it cannot catch: a
// broker that answers less than it has before any proof says more (an
// older high watermark, no data), which is indistinguishable from a broker
// behind the others; read through
// another broker then, or compare several (stele consume --quorum is not
// built yet). docs/trust.md has the whole list.
package verified

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/stele-io/stele/pkg/proof"
)

var (
	// ErrGap: the broker returned batches that leave offsets out.
	ErrGap = fmt.Errorf("%w: offsets left out", proof.ErrUnproven)
	// ErrForgedWatermark: the broker claims a high watermark it cannot
	// prove a record below.
	ErrForgedWatermark = fmt.Errorf("%w: high watermark", proof.ErrUnproven)
)

// Batch is a proven batch as Poll returns it.
type Batch struct {
	*proof.Verified
}

// Reader reads one partition from Next on.
type Reader struct {
	// Broker is the broker to read through (not trusted), e.g.
	// client.SeedBrokers()[0] of a kgo client capped at Fetch v12
	// (kgo.MaxVersions(kversion.V3_0_0())): Reader names the topic, not
	// its id.
	Broker *kgo.Broker
	// Proofs fetches proofs (from any broker's HTTP API) and verifies
	// them against the trusted validators.
	Proofs    *proof.Client
	Topic     string
	Partition int32
	// Next is the next offset to read; Poll moves it past what it returns.
	Next int64
	// AllowGaps accepts offsets left out between batches: compaction
	// removes them on compacted topics, and no proof shows that nothing
	// was there. Leave it off for other topics.
	AllowGaps bool
	// MaxWaitMs is how long a Fetch waits for new records (0: 500).
	MaxWaitMs int32

	hwm      int64 // the highest watermark proven so far
	hwmClaim int64 // the last claim checked
	floor    int64 // the high watermark the signed state last proved: a claim below it must end a proven batch
	checked  bool  // a claim was checked against the signed state
}

// HighWatermark is the highest high watermark the broker claimed and
// Reader proved (a record just below it committed).
func (r *Reader) HighWatermark() int64 { return r.hwm }

// Poll fetches from Next, proves every batch returned and the high
// watermark claimed, and returns the proven batches, Next moved past
// them. A batch that begins before Next (a fetch returns whole batches)
// is returned whole; the caller skips the records below the offset it
// asked for.
func (r *Reader) Poll(ctx context.Context) ([]Batch, error) {
	wait := r.MaxWaitMs
	if wait == 0 {
		wait = 500
	}
	raw, hwm, err := Fetch(ctx, r.Broker, r.Topic, r.Partition, r.Next, wait)
	if err != nil {
		return nil, err
	}
	var out []Batch
	for _, raw := range raw {
		v, err := r.Proofs.Check(ctx, r.Topic, r.Partition, raw)
		if err != nil {
			return out, err
		}
		if v.LastOffset < r.Next {
			continue // wholly below what was asked: a broker may send it
		}
		if len(out) == 0 && v.BaseOffset > r.Next || len(out) > 0 && v.BaseOffset != r.Next {
			if !r.AllowGaps {
				return out, fmt.Errorf("%w: %s-%d: the next batch after offset %d begins at %d", ErrGap, r.Topic, r.Partition, r.Next-1, v.BaseOffset)
			}
		}
		out = append(out, Batch{v})
		r.Next = v.LastOffset + 1
		r.hwm = max(r.hwm, r.Next)
	}
	if err := r.checkWatermark(ctx, hwm); err != nil {
		return out, err
	}
	return out, nil
}

// Fetch asks broker for the records of the partition from offset on
// (Fetch v12, read_uncommitted, waiting up to maxWaitMs for some) and
// returns the whole batches of the answer, unverified, and the high
// watermark it claims.
func Fetch(ctx context.Context, broker *kgo.Broker, topic string, partition int32, offset int64, maxWaitMs int32) ([][]byte, int64, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = maxWaitMs
	req.MinBytes = 1
	req.MaxBytes = 8 << 20
	req.SessionEpoch = -1
	t := kmsg.NewFetchRequestTopic()
	t.Topic = topic
	p := kmsg.NewFetchRequestTopicPartition()
	p.Partition = partition
	p.FetchOffset = offset
	p.CurrentLeaderEpoch = -1
	p.LogStartOffset = -1
	p.PartitionMaxBytes = 4 << 20
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	resp, err := broker.Request(ctx, req)
	if err != nil {
		return nil, 0, err
	}
	fr := resp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(fr.ErrorCode); err != nil {
		return nil, 0, err
	}
	if len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 || fr.Topics[0].Partitions[0].Partition != partition {
		return nil, 0, fmt.Errorf("%w: the broker answered a fetch of %s-%d with other partitions", proof.ErrUnproven, topic, partition)
	}
	fp := fr.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(fp.ErrorCode); err != nil {
		return nil, 0, err
	}
	return split(fp.RecordBatches), fp.HighWatermark, nil
}

// stateRetries is how often checkWatermark proves the partition's state
// again when it is below the claim: the broker proving may be a block
// behind the one fetched from.
const stateRetries = 5

// checkWatermark checks a claimed high watermark against the partition's
// offsets in the signed state (proof.PartitionKey, a state proof against
// the header of the same height): the first claim, and every claim above
// what is proven. A claim above the proven high watermark (after a few
// tries, for a prover a block behind) is refused; a claim between, the
// state having moved on, or below one proven before (a broker behind the
// prover), must end a committed batch (the record just below it is
// proven).
func (r *Reader) checkWatermark(ctx context.Context, claim int64) error {
	if claim < r.floor {
		// A broker behind the one proving (or one holding records back,
		// which a reader cannot tell from lag): nothing it claims is false
		// as long as the claim ends a committed batch.
		return r.checkBatchEnd(ctx, claim)
	}
	if r.checked && (claim <= r.hwm || claim == r.hwmClaim) {
		return nil
	}
	proven, height, err := r.provenWatermark(ctx)
	for try := 0; err == nil && proven < claim && try < stateRetries; try++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		proven, height, err = r.provenWatermark(ctx)
	}
	switch {
	case err != nil:
		return fmt.Errorf("%w: %s-%d: the broker claims high watermark %d, and the partition's state cannot be proven: %v", ErrForgedWatermark, r.Topic, r.Partition, claim, err)
	case proven < claim:
		return fmt.Errorf("%w: %s-%d: the broker claims high watermark %d; the state signed at height %d proves %d", ErrForgedWatermark, r.Topic, r.Partition, claim, height, proven)
	}
	r.checked, r.floor = true, max(r.floor, proven)
	if claim == proven || claim == 0 {
		r.hwmClaim, r.hwm = claim, max(r.hwm, claim)
		return nil
	}
	if err := r.checkBatchEnd(ctx, claim); err != nil {
		return err
	}
	r.hwmClaim = claim
	r.hwm = max(r.hwm, claim)
	return nil
}

// checkBatchEnd requires that a claimed high watermark ends a committed
// batch: the record just below it is proven, as the last of its batch.
func (r *Reader) checkBatchEnd(ctx context.Context, claim int64) error {
	if claim == 0 {
		return nil
	}
	v, err := r.Proofs.Prove(ctx, r.Topic, r.Partition, claim-1)
	if err != nil {
		return fmt.Errorf("%w: %s-%d: the broker claims high watermark %d and no record below it is proven: %v", ErrForgedWatermark, r.Topic, r.Partition, claim, err)
	}
	if v.LastOffset != claim-1 {
		return fmt.Errorf("%w: %s-%d: claimed high watermark %d is inside a batch ending at %d", ErrForgedWatermark, r.Topic, r.Partition, claim, v.LastOffset)
	}
	return nil
}

// provenWatermark proves the partition's high watermark in the signed
// state and returns it with the height it holds at.
func (r *Reader) provenWatermark(ctx context.Context) (int64, int64, error) {
	k := proof.PartitionKey(r.Topic, r.Partition)
	v, err := r.Proofs.ProveState(ctx, k)
	if err != nil {
		return 0, 0, err
	}
	raw := v.Values[string(k)]
	if raw == nil {
		return 0, v.Height, fmt.Errorf("%s-%d is proven absent at height %d", r.Topic, r.Partition, v.Height)
	}
	p, err := proof.DecodePartition(raw)
	if err != nil {
		return 0, v.Height, fmt.Errorf("the proven partition does not decode: %w", err)
	}
	return p.HighWatermark, v.Height, nil
}

// split cuts a Fetch answer's records into whole batches; a partial last
// batch (the broker may cut one at the size limit) is left out.
func split(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= 12 {
		n := int64(int32(binary.BigEndian.Uint32(b[8:12]))) + 12
		if n < 12 || n > int64(len(b)) {
			break
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}
