package fsm

// Result is the outcome of one command. Code is a Kafka error code (0 for
// success, see github.com/twmb/franz-go/pkg/kerr); the other fields are set
// by the commands they belong to.
type Result struct {
	Code    int16
	Message string
	// Produce: the offset given to the first record, the block time when the
	// topic uses LogAppendTime (-1 otherwise), and the log start offset.
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
	// Height is the block that committed the command, set by the broker
	// when it answers (not part of the results' encoding or the app hash).
	Height int64
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
}

func fail(code int16, msg string) Result { return Result{Code: code, Message: msg} }

func encodeResults(rs []Result) []byte {
	w := &writer{}
	w.count(len(rs))
	for _, r := range rs {
		w.i16(r.Code)
		w.str(r.Message)
		w.i64(r.BaseOffset)
		w.i64(r.LogAppendTime)
		w.i64(r.LogStartOffset)
		w.raw(r.TopicID[:])
		w.i64(r.LowWatermark)
		if r.Group != nil { // absent for every other command: their encoding is unchanged
			r.Group.encode(w)
		}
		if r.ProducerID != 0 || r.ProducerEpoch != 0 {
			w.i64(r.ProducerID)
			w.i16(r.ProducerEpoch)
		}
		if r.VersionConflict {
			w.i64(r.KeyVersion)
		}
	}
	return w.b
}
