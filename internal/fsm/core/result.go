package core

import (
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Result is the outcome of one command. Code is a Kafka error code (0 for
// success, see github.com/twmb/franz-go/pkg/kerr); the other fields are set
// by the commands they belong to.
//
// Only the code and the structured fields are hashed (encodeResults); the
// Message is for people and travels outside consensus (the transaction's
// CometBFT Log and the local answer to the client), so rewording a message,
// or a library rewording an error it returns, cannot fork the chain.
type Result struct {
	Code    int16
	Message string
	// Produce: the offset given to the first record, the block time when the
	// topic uses LogAppendTime (-1 otherwise; for an idempotent retry the
	// max timestamp its batch was stored with, whatever the type, as Kafka
	// answers), and the log start offset.
	BaseOffset     int64
	LogAppendTime  int64
	LogStartOffset int64
	// CreateTopic: the new topic's ID.
	TopicID TopicID
	// DeleteRecords: the new log start offset.
	LowWatermark int64
	// Group commands: the member and generation (see GroupResult).
	Group *GroupResult
	// InitProducerID: the producer id and epoch given.
	ProducerID    int64
	ProducerEpoch int16
	// Produce refused because a record's expected version did not hold
	// (Code INVALID_RECORD; Message names the key): the version the key
	// was at (-1: no event yet).
	VersionConflict bool
	KeyVersion      int64
	// Produce refused because some of its records break a rule (KIP-467):
	// the failing records, in order, at most MaxRecordErrors of them (the
	// Message gives the total). Their indexes are hashed, their messages
	// are not.
	RecordErrors []RecordError
	// Height is the block that committed the command, set by the broker
	// when it answers (not part of the results' encoding or the app hash).
	Height int64
	// Schema registry commands (the schemas module): what the registry
	// did or why it refused (see SchemaResult).
	Schema *SchemaResult
	// ShareAcquire (the shares module): what it acknowledged and acquired.
	Share *ShareResult
	// Counts says what a command did, for its answer (DeleteTenant: what
	// it removed, by kind). Like Height, not part of the results'
	// encoding or the app hash: the state changes it counts are.
	Counts []Count
}

// Count is how many of something a command changed (Result.Counts).
type Count struct {
	What string
	N    int
}

// MaxRecordErrors bounds Result.RecordErrors. Kafka lists every failing
// record of a batch; a batch may hold hundreds of thousands of records, and
// every index is in the hashed results, so Stele lists the first 1000 (a
// client fails the records not listed too: the whole batch is refused).
const MaxRecordErrors = 1000

// RecordError is one record a Produce refused: Index is its position in the
// partition's record set (its batch_index, when the set is one batch, as a
// Produce v3+ carries), Message says why (not hashed).
type RecordError struct {
	Index   int32
	Message string
}

// SchemaResult is what a schema registry command tells the broker that
// submitted it: the schema's id and the subject's version it registered
// (or found registered), the versions a delete removed, and, when the
// command was refused, the error code Confluent's Schema Registry gives
// for the case (40401 subject not found, 409 incompatible, ...), which the
// REST API answers.
type SchemaResult struct {
	ID        int32
	Version   int32
	ErrorCode int32
	Versions  []int32
}

// Encode writes r (EncodeResults).
func (r *SchemaResult) Encode(w *Writer) {
	w.I32(r.ID)
	w.I32(r.Version)
	w.I32(r.ErrorCode)
	w.Count(len(r.Versions))
	for _, v := range r.Versions {
		w.I32(v)
	}
}

// ShareResult is what a ShareAcquire did: for each partition it named, in
// its order, the partition's code, its acknowledgements' code and the
// records it acquired; the acquisition lock's duration; how many locks of
// those partitions had expired when it applied.
type ShareResult struct {
	LockMs  int32
	Expired int32
	Parts   []SharePartResult
}

// SharePartResult is one partition of a ShareResult.
type SharePartResult struct {
	Topic         string
	Partition     int32
	Code, AckCode int16
	Acquired      []AcquiredRange
}

// AcquiredRange is a run of offsets acquired with one delivery count.
type AcquiredRange struct {
	First, Last int64
	Deliveries  int16
}

// Encode writes r (EncodeResults).
func (r *ShareResult) Encode(w *Writer) {
	w.I32(r.LockMs)
	w.I32(r.Expired)
	w.Count(len(r.Parts))
	for _, p := range r.Parts {
		w.Str(p.Topic)
		w.I32(p.Partition)
		w.I16(p.Code)
		w.I16(p.AckCode)
		w.Count(len(p.Acquired))
		for _, a := range p.Acquired {
			w.I64(a.First)
			w.I64(a.Last)
			w.I16(a.Deliveries)
		}
	}
}

// GroupResult is what a group command tells the broker that submitted it.
type GroupResult struct {
	// MemberID is the member's id (new members learn theirs here).
	MemberID string
	// Generation: for JoinGroup, the group's generation when the join was
	// applied — the join's answer is the first generation above it that
	// includes the member, unless Ready says the current one is the answer.
	Generation int32
	Ready      bool
	// ConsumerGroupHeartbeat: the member's assignment, when it is to be
	// sent (Generation is then the member epoch).
	SendAssignment bool
	Assignment     TopicPartitions
}

func (r *GroupResult) Encode(w *Writer) {
	w.Str(r.MemberID)
	w.I32(r.Generation)
	w.Bool(r.Ready)
	if r.SendAssignment {
		EncodeTopicPartitions(w, r.Assignment)
	}
}

func EncodeTopicPartitions(w *Writer, tp TopicPartitions) {
	topics := SortedKeys(tp)
	w.Count(len(topics))
	for _, t := range topics {
		w.Str(t)
		w.Count(len(tp[t]))
		for _, p := range tp[t] {
			w.I32(p)
		}
	}
}

func DecodeTopicPartitions(r *Reader) TopicPartitions {
	tp := TopicPartitions{}
	for i, n := 0, r.Count(2); i < n; i++ {
		t := r.Str()
		ps := []int32{}
		for j, np := 0, r.Count(4); j < np; j++ {
			ps = append(ps, r.I32())
		}
		tp[t] = ps
	}
	return tp
}

// TopicPartitions are partitions by topic name.
type TopicPartitions map[string][]int32

func (tp TopicPartitions) Clone() TopicPartitions {
	out := make(TopicPartitions, len(tp))
	for t, ps := range tp {
		out[t] = slices.Clone(ps)
	}
	return out
}

func (tp TopicPartitions) Has(t string, p int32) bool { return slices.Contains(tp[t], p) }

func (tp TopicPartitions) Add(t string, p int32) {
	if !tp.Has(t, p) {
		tp[t] = append(tp[t], p)
		slices.Sort(tp[t])
	}
}

// Minus returns the partitions of tp not in o.
func (tp TopicPartitions) Minus(o TopicPartitions) TopicPartitions {
	out := TopicPartitions{}
	for _, t := range SortedKeys(tp) {
		for _, p := range tp[t] {
			if !o.Has(t, p) {
				out.Add(t, p)
			}
		}
	}
	return out
}

func (tp TopicPartitions) Count() int {
	n := 0
	for _, ps := range tp {
		n += len(ps)
	}
	return n
}

func (tp TopicPartitions) Equal(o TopicPartitions) bool {
	return tp.Count() == o.Count() && tp.Minus(o).Count() == 0
}

// TxOutcome is what applying one transaction produced.
type TxOutcome struct {
	Nonce Nonce
	// Batch is the digest of a certified transaction's payload (zero for
	// an inline one); Nonce is then the payload's, once it was read.
	Batch Digest
	// Code is 0 when the transaction decoded; otherwise no command ran and
	// Log says why.
	Code    uint32
	Log     string
	Results []Result
	// Data is the deterministic encoding of Results, committed to by the
	// block's results hash.
	Data []byte
}

// BlockOutcome is what applying a block produced.
type BlockOutcome struct {
	Height  int64
	Txs     []TxOutcome
	AppHash []byte
	// ValidatorUpdates are the changes of voting power the block made, in
	// the order made; the orderer hands them to consensus.
	ValidatorUpdates []ValidatorUpdate
}

func Fail(code int16, msg string) Result { return Result{Code: code, Message: msg} }

// Presence bits of encodeResults: which optional fields follow.
const (
	resGroup = 1 << iota
	resProducer
	resVersionConflict
	resRecordErrors
	resSchema
	resShare
)

// EncodeResults is the deterministic encoding of a transaction's results,
// committed to by the app hash and by the block's results hash
// (ExecTxResult.Data). It holds codes and structured fields only, never
// Message: see Result.
//
//	results := count n | n × result
//	result  := i16 code | i64 base offset | i64 log append time |
//	           i64 log start offset | 16-byte topic id | i64 low watermark |
//	           u8 presence | [group result] | [i64 producer id | i16 epoch] |
//	           [i64 key version] | [count k | k × i32 record index] |
//	           [schema result: i32 id | i32 version | i32 error code |
//	            count v | v × i32 version]
func EncodeResults(rs []Result) []byte {
	w := &Writer{}
	w.Count(len(rs))
	for _, r := range rs {
		w.I16(r.Code)
		w.I64(r.BaseOffset)
		w.I64(r.LogAppendTime)
		w.I64(r.LogStartOffset)
		w.Raw(r.TopicID[:])
		w.I64(r.LowWatermark)
		var presence uint8
		if r.Group != nil {
			presence |= resGroup
		}
		if r.ProducerID != 0 || r.ProducerEpoch != 0 {
			presence |= resProducer
		}
		if r.VersionConflict {
			presence |= resVersionConflict
		}
		if len(r.RecordErrors) > 0 {
			presence |= resRecordErrors
		}
		if r.Schema != nil {
			presence |= resSchema
		}
		if r.Share != nil {
			presence |= resShare
		}
		w.U8(presence)
		if r.Group != nil {
			r.Group.Encode(w)
		}
		if presence&resProducer != 0 {
			w.I64(r.ProducerID)
			w.I16(r.ProducerEpoch)
		}
		if r.VersionConflict {
			w.I64(r.KeyVersion)
		}
		if presence&resRecordErrors != 0 {
			w.Count(len(r.RecordErrors))
			for _, e := range r.RecordErrors {
				w.I32(e.Index)
			}
		}
		if r.Schema != nil {
			r.Schema.Encode(w)
		}
		if r.Share != nil {
			r.Share.Encode(w)
		}
	}
	return w.B
}

// resultsLog is the human-readable account of a transaction's failed
// commands for its CometBFT Log (not hashed): "command 1: CODE_NAME: message"
// per failed command, separated by "; ".
func resultsLog(rs []Result) string {
	var b strings.Builder
	for i, r := range rs {
		if r.Code == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "command %d: %s", i, kerr.TypedErrorForCode(r.Code).Message)
		if r.Message != "" {
			b.WriteString(": ")
			b.WriteString(r.Message)
		}
	}
	return b.String()
}
