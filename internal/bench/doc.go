// Package bench is the engine of `stele bench`: a Kafka load generator that
// measures produce throughput and latency, consume throughput, and
// end-to-end latency against any Kafka-compatible broker (Stele, Apache
// Kafka, franz-go's kfake). It is a plain Kafka client built on franz-go's
// kgo and kadm and knows nothing of Stele's internals.
//
// Run(ctx, Config) runs one scenario and returns a Report:
//
//   - Produce: Producers clients send records of RecordSize bytes, open
//     loop or at Rate records/s in total; produce latency runs from each
//     record's intended send time to its acknowledgement, so a stall of the
//     broker or of the client counts against every record it delayed (no
//     coordinated omission; see pacer).
//   - Consume: Consumers clients read the topic from its start (or a group's
//     committed offsets) to the end offsets it had when the run started, as
//     fast as they can, and check every record's size.
//   - EndToEnd: both at once; each value starts with its intended send time
//     (8 bytes, big-endian Unix nanoseconds) and the consumers measure the
//     latency to its receipt.
//   - Commit: Consumers members of a group read the topic and commit every
//     record's offset synchronously before the next (commit.go); the
//     commit latency is from sending each OffsetCommit to its answer.
//
// Latencies go into Histogram, a fixed-size log-linear histogram (about
// 0.4% relative error, mergeable). Records sent during Warmup (Commit:
// commits) are left out of every figure. Only acknowledged records (and
// answered commits) count; a failed one adds to Errors and the run goes on.
//
// Not done: transactions, idempotence off with acks=all, record headers,
// compressible payloads (values are random bytes), several topics, and
// figures per partition or per client.
//
// Dependencies: franz-go only; bench imports no other internal package, and
// only internal/cli imports it.
package bench
