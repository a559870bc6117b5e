package core

import "encoding/hex"

// The core's part of a topic: its ID, which results carry (Result.TopicID)
// and every module names its keys by. The topics themselves, their
// partitions and the view of them are the topics module's (topic_view.go).

// TopicID is a topic's 16-byte UUID (KIP-516), derived deterministically from
// the chain so that every broker assigns the same one.
type TopicID [16]byte

// IsZero reports whether id is the zero UUID, which Kafka reserves for "none".
func (id TopicID) IsZero() bool { return id == TopicID{} }

func (id TopicID) String() string {
	h := hex.EncodeToString(id[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
