#!/usr/bin/env bash
# transactions.sh: Kafka transactions (KIP-98, the classic protocol) against
# one `stele serve`, with confluent-kafka (librdkafka) unchanged. Each
# scenario gets fresh 3-partition topics and transactional ids and reports
# ok or FAILED with its time; the test fails if any did. librdkafka's "eos"
# debug log of every transactional producer is kept in client-*.txt
# (E2E_KEEP=1 keeps it).
#
#  1. Commit and abort (txn_commit_abort.py): two transactional producers
#     run five rounds of one transaction each side by side, their records
#     interleaved in every partition (keys name the transaction), 6 of the
#     10 transactions committed and 4 aborted. While two are open:
#     ListOffsets read_committed answers the last stable offset (the first
#     offset of the older open transaction) and read_uncommitted the high
#     watermark; a read_committed consumer stops at the last stable offset
#     with exactly the committed records so far; DescribeTransactions v0
#     says Ongoing with the producer ids, epochs and partitions and
#     ListTransactions v0 lists both; as each ends the last stable offset
#     moves up to the other's first offset, then to the high watermark, and
#     DescribeTransactions says CompleteCommit / CompleteAbort. At the end,
#     read_committed (default fetches, and 1 KiB per partition so that many
#     fetches carry aborted transaction lists) reads exactly the committed
#     records, each once, at its acknowledged offset, in offset order;
#     read_uncommitted reads every record of every transaction, each once,
#     no marker delivered as a record; each partition's high watermark is
#     its records plus one marker per transaction.
#  2. Consume-transform-produce (txn_ctp.py): a read_committed consumer in a
#     group (no auto-commit) and a transactional producer copy an input
#     topic to an output topic in batches, each a transaction with
#     send_offsets_to_transaction(position, consumer_group_metadata());
#     batch 3 is aborted after its copies were flushed, and the copier seeks
#     back to the group's committed offsets and reads it again. Then: the
#     group's committed offsets are the input's high watermarks; the output
#     read read_committed holds every input record exactly once (key and
#     input position as consumed, input order per key); read_uncommitted
#     also holds the aborted batch's copies, and only those.
#  3. Fencing (txn_fencing.py): while a producer has a transaction open
#     with records in the log, a second producer with the same
#     transactional.id runs init_transactions: same producer id, higher
#     epoch, the open transaction aborted (last stable offset = high
#     watermark). The zombie's commit_transaction() then fails with a fatal
#     _FENCED error; in a second case the zombie first writes more records,
#     which all fail (INVALID_PRODUCER_EPOCH) and never reach the log, then
#     its commit fails the same way. The successors commit transactions of
#     their own; read_committed holds exactly their records, nothing of the
#     zombies'; read_uncommitted also the zombies' aborted records.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The helpers import txn_lib, group_lib, e2elib: no __pycache__ in the tree.
export PYTHONDONTWRITEBYTECODE=1

PARTS=3
PER_TXN=60  # records of each transaction of scenario 1
CTP_N=1000  # input records of scenario 2 ...
CTP_KEYS=40
CTP_BATCH=100 # ... copied this many a transaction
FENCE_N=30  # records of each transaction of scenario 3

e2e_setup
e2e_broker_init
e2e_broker_start

run=tx$$x$RANDOM
failed=()

# py LIMIT SCRIPT ARGS... runs one of the Python scripts with a deadline.
py() {
	local limit=$1 script=$2
	shift 2
	e2e_timeout "$limit" "$PY" "$E2E_DIR/$script" --bootstrap "$BROKER" "$@"
}

# --- 1. committed and aborted transactions --------------------------------------

commit_abort() {
	local topic=e2e-txn-commit-abort-$run
	e2e_topic_create "$topic" "$PARTS"
	py 28 txn_commit_abort.py --topic "$topic" --partitions "$PARTS" --per-txn "$PER_TXN" \
		--client-log "$E2E_TMP/client-commit-abort.txt" --deadline 25
}

# --- 2. consume-transform-produce -----------------------------------------------

consume_transform_produce() {
	local in=e2e-txn-ctp-in-$run out=e2e-txn-ctp-out-$run
	e2e_topic_create "$in" "$PARTS"
	e2e_topic_create "$out" "$PARTS"
	py 33 txn_ctp.py --input "$in" --output "$out" --partitions "$PARTS" --count "$CTP_N" --keys "$CTP_KEYS" \
		--batch "$CTP_BATCH" --abort-batch 3 --client-log "$E2E_TMP/client-ctp.txt" --deadline 30
}

# --- 3. fencing -------------------------------------------------------------------

fencing() {
	local topic=e2e-txn-fencing-$run
	e2e_topic_create "$topic" "$PARTS"
	py 23 txn_fencing.py --topic "$topic" --partitions "$PARTS" --count "$FENCE_N" \
		--client-log "$E2E_TMP/client-fencing.txt" --deadline 20
}

# The limits add up to 100s, under run.sh's 150s per test with the broker's
# start and stop; a passing run takes about a fifth of that.
scenario commit-abort 30 commit_abort
scenario consume-transform-produce 35 consume_transform_produce
scenario fencing 25 fencing
((${#failed[@]} == 0)) || fail "transactions failed in: ${failed[*]}"
e2e_broker_stop 30
log "PASS"
