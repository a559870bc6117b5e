package record

import "encoding/binary"

// Transaction markers (KIP-98): a control batch ends a producer's
// transaction in a partition, committing or aborting what it wrote there.

// MarkerBatch builds the control batch that ends producer pid's
// transaction (epoch) with a commit or an abort, stamped ts: one control
// record whose key is {version 0, type 1 commit / 0 abort} and whose value
// is {version 0, coordinator epoch}.
func MarkerBatch(pid int64, epoch int16, commit bool, coordinatorEpoch int32, ts int64) []byte {
	key := make([]byte, 4)
	if commit {
		binary.BigEndian.PutUint16(key[2:], 1)
	}
	value := make([]byte, 6)
	binary.BigEndian.PutUint32(value[2:], uint32(coordinatorEpoch))
	b, err := Build(Header{FirstTimestamp: ts, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: -1,
		Attributes: attrTransactional | attrControl}, []Record{{Key: key, Value: value}})
	if err != nil { // a fixed, tiny batch: cannot fail
		panic("stele/record: building a transaction marker: " + err.Error())
	}
	return b
}

// MarkerCommits reports, for a control batch, whether its first record is
// a commit marker (ok is false when it holds no readable marker).
func MarkerCommits(b []byte) (commit, ok bool) {
	_, recs, err := Records(b)
	if err != nil || len(recs) == 0 || len(recs[0].Key) < 4 {
		return false, false
	}
	return binary.BigEndian.Uint16(recs[0].Key[2:4]) == 1, true
}
