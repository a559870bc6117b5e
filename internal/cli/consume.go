package cli

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// consumeOptions are the flags of `stele consume`.
type consumeOptions struct {
	fromBeginning bool
	offset        string
	partition     int32
	maxMessages   int64
	idle          time.Duration
	format        string
	isolation     *enumFlag
	group         string
	shareGroup    string
	verify        bool
	quorum        bool
	subject       string
	trust         trustOptions
}

func newConsumeCmd(g *globalOptions) *cobra.Command {
	o := &consumeOptions{isolation: newEnumFlag("read_uncommitted", "read_uncommitted", "read_committed")}
	c := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Print records of a topic (kafka-console-consumer.sh)",
		Long: `Print records of a topic to stdout (kafka-console-consumer.sh). Without
--group every partition is read directly and nothing is committed.

With --group G it consumes as a member of consumer group G: it reads the
partitions the group assigns it, starting at the group's committed offset, and
commits the offset after each record it has printed (automatically every 5s,
on rebalance and once more at exit). A partition with no committed offset
starts where --from-beginning says (the end without it). --timeout-idle
counts from when the group has assigned the partitions. --partition and
--offset do not go with --group.

By default it starts at the end of each partition and runs until interrupted
(SIGINT/SIGTERM), then exits 0. --max-messages and --timeout-idle end it
earlier. "Processed a total of N messages" is printed on stderr at exit.

--format is a template as kcat's -f; --output json prints one JSON object per
record per line instead (key, value and header values are strings, or all
base64 with "encoding": "base64" when any of them is not valid UTF-8).

--verify trusts no broker: every batch is read through the first --brokers
broker and proven with the proof a broker's HTTP API (--http) serves, against
the validators of --genesis FILE (or the genesis pinned on first use, as
stele verify does). A record that cannot be proven, offsets left out, or a
high watermark no record backs end it with an error (exit 1) before anything
unproven is printed. It reads partitions directly (not with --group), with
read_uncommitted. docs/trust.md says what it guarantees.

--quorum needs no trusted genesis: every partition is read through every
--brokers broker at once (at least f+1 of the cluster's 3f+1, so that one is
honest), and only batches all of them returned byte for byte are printed;
brokers that disagree end it with an error (exit 1).

--subject PATTERN prints only the records whose subject (the stele-subject
header, or the topic's stele.subject.from) matches PATTERN: dotted tokens,
* for any one token, > at the end for one or more (docs/subjects.md). The
broker filters, skipping batches that hold no match unread; the records
come from a broker's HTTP API (--http, or STELE_HTTP), committed ones only
(read_committed), partition by partition. --from-beginning, --partition,
--offset, --max-messages, --timeout-idle, --format and --output json work as
without it; --group, --verify and --quorum do not go with it.

With --share-group G it consumes as a member of share group G (KIP-932,
docs/share-groups.md): records are handed out one by one among the group's
members, however many there are, and each record printed is accepted, so no
member of the group gets it again; records received but not printed (past
--max-messages, or at an interrupt) are released to the others. Where a new
share group starts is the group's share.auto.offset.reset config (stele
config alter --group G --set share.auto.offset.reset=earliest), not
--from-beginning.

--format json prints each record as --output json does, with its key and
value decoded when they are in Confluent's wire format (a magic byte 0 and
a schema id): key_typed and value_typed hold the schema id and the value as
JSON, the schemas fetched once each from the brokers' registry (--http,
docs/schemas.md).`,
		Example: `  stele consume orders --from-beginning --max-messages 10
  stele consume orders --partition 2 --offset 1500 --format '%p/%o %k=%v\n'
  stele consume orders --from-beginning --timeout-idle 5s --output json
  stele consume orders --group billing --from-beginning
  stele consume jobs --share-group workers --max-messages 100
  stele consume orders --from-beginning --verify --genesis cluster/node0/cometbft/config/genesis.json
  stele consume orders --subject 'orders.*.fr.>' --from-beginning --timeout-idle 2s
  stele consume orders --from-beginning --format json --http 127.0.0.1:8080`,
		Args: exactArgs("TOPIC"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if o.shareGroup != "" && (cmd.Flags().Changed("subject") || o.quorum || o.verify) {
				return usageErrorf("--share-group does not go with --subject, --verify or --quorum")
			}
			if cmd.Flags().Changed("subject") {
				return runSubjectConsume(cmd, g, o, a[0])
			}
			if o.quorum {
				return runQuorumConsume(cmd, g, o, a[0])
			}
			if o.verify {
				return runVerifiedConsume(cmd, g, o, &o.trust, a[0])
			}
			if cmd.Flags().Changed("genesis") || cmd.Flags().Changed("http") && o.format != formatJSON {
				return usageErrorf("--genesis and --http go with --verify (and --http with --subject or --format json)")
			}
			return runConsume(cmd, g, o, a[0])
		},
	}
	f := c.Flags()
	f.BoolVar(&o.fromBeginning, "from-beginning", false, "start at the earliest offset instead of the end")
	f.StringVar(&o.offset, "offset", "", "start offset with --partition: N, earliest or latest")
	f.Int32Var(&o.partition, "partition", -1, "consume only this partition")
	f.Int64Var(&o.maxMessages, "max-messages", 0, "exit after printing this many records")
	f.DurationVar(&o.idle, "timeout-idle", 0, "exit when no record arrives for this long (default: run until interrupted)")
	f.StringVar(&o.format, "format", defaultFormat, formatHelp)
	f.Var(o.isolation, "isolation", "read_committed hides records of open and aborted transactions")
	f.StringVar(&o.group, "group", "", "consume as a member of this consumer group, committing offsets")
	f.StringVar(&o.shareGroup, "share-group", "", "consume as a member of this share group, accepting each record printed")
	f.BoolVar(&o.verify, "verify", false, "prove every batch against the validators' signatures before printing it (docs/trust.md)")
	f.BoolVar(&o.quorum, "quorum", false, "read through every --brokers broker (at least f+1 of 3f+1) and print only what all of them return identically")
	f.StringVar(&o.subject, "subject", "", "only records whose subject matches this pattern (* one token, > the rest), filtered by the broker, over its HTTP API (--http)")
	o.trust.register(c)
	return c
}

// startOffset turns the start flags into a kgo offset; exact is set for a
// numeric --offset, which must be checked against the partition's bounds.
func (o *consumeOptions) startOffset() (start kgo.Offset, exact int64, err error) {
	switch o.offset {
	case "":
		if o.fromBeginning {
			return kgo.NewOffset().AtStart(), -1, nil
		}
		return kgo.NewOffset().AtEnd(), -1, nil
	case "earliest":
		return kgo.NewOffset().AtStart(), -1, nil
	case "latest":
		return kgo.NewOffset().AtEnd(), -1, nil
	}
	n, err := strconv.ParseInt(o.offset, 10, 64)
	if err != nil || n < 0 {
		return kgo.Offset{}, -1, usageErrorf("invalid --offset %q: want a number from 0, earliest or latest", o.offset)
	}
	return kgo.NewOffset().At(n), n, nil
}

// validate checks flag combinations, as kafka-console-consumer.sh does.
func (o *consumeOptions) validate(cmd *cobra.Command, g *globalOptions) error {
	switch {
	case cmd.Flags().Changed("group") && o.group == "":
		return usageErrorf("--group must not be empty")
	case cmd.Flags().Changed("share-group") && o.shareGroup == "":
		return usageErrorf("--share-group must not be empty")
	case o.shareGroup != "" && (o.group != "" || o.partition >= 0 || o.offset != ""):
		return usageErrorf("--share-group does not go with --group, --partition or --offset: a share group hands out the records of its topics' partitions")
	case o.shareGroup != "" && o.fromBeginning:
		return usageErrorf("--from-beginning does not go with --share-group: a new share group starts where its share.auto.offset.reset says (stele config alter --group %s --set share.auto.offset.reset=earliest)", o.shareGroup)
	case o.shareGroup != "" && cmd.Flags().Changed("isolation"):
		return usageErrorf("--isolation does not go with --share-group: a share group reads as its share.isolation.level says")
	case o.group != "" && o.partition >= 0:
		return usageErrorf("--partition cannot be used with --group: a group member reads the partitions the group assigns it")
	case o.offset != "" && o.partition < 0:
		return usageErrorf("--offset needs --partition: offsets are per partition")
	case o.offset != "" && o.fromBeginning:
		return usageErrorf("give either --from-beginning or --offset, not both")
	case o.partition < -1:
		return usageErrorf("invalid --partition %d: partitions are numbered from 0", o.partition)
	case o.maxMessages < 0:
		return usageErrorf("invalid --max-messages %d: must be 0 (no limit) or more", o.maxMessages)
	case o.idle < 0:
		return usageErrorf("invalid --timeout-idle %v: must be positive", o.idle)
	case g.jsonOutput() && cmd.Flags().Changed("format"):
		return usageErrorf("--format and --output json cannot be used together")
	}
	return nil
}

func runConsume(cmd *cobra.Command, g *globalOptions, o *consumeOptions, topic string) error {
	if err := o.validate(cmd, g); err != nil {
		return err
	}
	var format recordFormat
	var typed *typedEmitter
	var err error
	if o.format == formatJSON {
		cl, err := schemaClient(cmd, g, o.trust.httpAddr)
		if err != nil {
			return err
		}
		typed = newTypedEmitter(cmd.Context(), cl)
	} else if format, err = parseFormat(o.format); err != nil {
		return usageError{err}
	}
	start, exact, err := o.startOffset()
	if err != nil {
		return err
	}
	if err := checkConsumeTarget(cmd, g, topic, o.partition, exact); err != nil {
		return err
	}

	// With --group, start is where partitions without a committed offset
	// begin: kgo uses the reset offset only for those.
	opts := []kgo.Opt{kgo.ConsumeResetOffset(start)}
	var grp *groupHooks
	if o.shareGroup != "" {
		// A share group member (KIP-932): no reset offset, no group
		// callbacks (kgo refuses them with a share group); the idle clock
		// starts at once.
		grp = &groupHooks{joined: make(chan struct{}), share: true}
		close(grp.joined)
		opts = []kgo.Opt{kgo.ConsumeTopics(topic), kgo.ShareGroup(o.shareGroup), kgo.FetchMaxWait(groupFetchMaxWait(o.idle))}
	} else if o.group != "" {
		grp = &groupHooks{}
		opts = append(opts, kgo.ConsumeTopics(topic), kgo.ConsumerGroup(o.group), kgo.AutoCommitMarks(),
			kgo.OnPartitionsAssigned(grp.onAssigned()), kgo.FetchMaxWait(groupFetchMaxWait(o.idle)))
	} else if o.partition >= 0 {
		opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {o.partition: start}}))
	} else {
		opts = append(opts, kgo.ConsumeTopics(topic))
	}
	if o.isolation.String() == "read_committed" {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := g.newClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()

	var emit func(*bufio.Writer, *kgo.Record) error
	switch {
	case typed != nil:
		emit = typed.emit
	case g.jsonOutput():
		emit = emitJSON
	default:
		var buf []byte
		emit = func(w *bufio.Writer, r *kgo.Record) error {
			buf = format.append(buf[:0], r)
			_, err := w.Write(buf)
			return err
		}
	}
	switch {
	case grp != nil && grp.share:
		grp.mark = func(rs ...*kgo.Record) { cl.MarkAcks(kgo.AckAccept, rs...) }
	case grp != nil:
		grp.mark = cl.MarkCommitRecords
	}
	n, err := consumeLoop(cmd.Context(), cl, o, bufio.NewWriter(cmd.OutOrStdout()), cmd.ErrOrStderr(), emit, grp)
	switch {
	case grp != nil && grp.share:
		err = errors.Join(err, leaveShareGroup(cmd, g, cl, o.shareGroup))
	case grp != nil:
		err = errors.Join(err, leaveGroup(cmd, g, cl, o.group))
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "Processed a total of %d messages\n", n)
	return err
}

// groupFetchMaxWait is how long a fetch of a group member may wait for data.
// A partition whose committed offset carries a leader epoch is validated
// (OffsetForLeaderEpoch, KIP-320) before kgo fetches it, so it joins the
// fetch session only with the next fetch: the first fetch, of the other
// partitions, must not be left waiting the default 5s, longer than
// --timeout-idle, while records wait in the validated partition.
func groupFetchMaxWait(idle time.Duration) time.Duration {
	if idle <= 0 {
		return time.Second
	}
	return min(time.Second, max(idle/4, 100*time.Millisecond))
}

// groupHooks connect consumeLoop to the consumer group of --group.
type groupHooks struct {
	// joined is closed when the group first assigns this member its
	// partitions (possibly none): the --timeout-idle clock starts then, as
	// joining can take seconds (Kafka delays a new group's first
	// rebalance by group.initial.rebalance.delay.ms, 3s by default).
	joined chan struct{}
	// mark marks records printed, for the next commit (a share group's:
	// accepts them).
	mark func(...*kgo.Record)
	// share: the group is a share group (--share-group).
	share bool
}

// onAssigned returns the kgo.OnPartitionsAssigned callback that closes
// h.joined the first time it is called.
func (h *groupHooks) onAssigned() func(context.Context, *kgo.Client, map[string][]int32) {
	h.joined = make(chan struct{})
	var once sync.Once
	return func(context.Context, *kgo.Client, map[string][]int32) { once.Do(func() { close(h.joined) }) }
}

// isJoined reports whether h.joined is closed.
func (h *groupHooks) isJoined() bool {
	select {
	case <-h.joined:
		return true
	default:
		return false
	}
}

// leaveGroup commits the offsets of the records printed and not yet
// committed, then leaves the group, each bounded by --timeout even when the
// command's context was cancelled (an interrupt still commits).
func leaveGroup(cmd *cobra.Command, g *globalOptions, cl *kgo.Client, group string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), g.timeout)
	defer cancel()
	var errs []error
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		errs = append(errs, fmt.Errorf("commit offsets of group %q: %w", group, err))
	}
	if err := cl.LeaveGroupContext(ctx); err != nil {
		errs = append(errs, fmt.Errorf("leave group %q: %w", group, err))
	}
	return errors.Join(errs...)
}

// leaveShareGroup sends the acceptances of the records printed, then
// leaves the share group (closing the client releases what was received
// and not printed), bounded by --timeout even after an interrupt.
func leaveShareGroup(cmd *cobra.Command, g *globalOptions, cl *kgo.Client, group string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), g.timeout)
	defer cancel()
	var errs []error
	if err := cl.FlushAcks(ctx); err != nil {
		errs = append(errs, fmt.Errorf("accept the records printed of share group %q: %w", group, err))
	}
	if err := cl.LeaveGroupContext(ctx); err != nil {
		errs = append(errs, fmt.Errorf("leave share group %q: %w", group, err))
	}
	return errors.Join(errs...)
}

// checkConsumeTarget fails early, with a clear message, when the topic or
// partition does not exist or a numeric start offset is out of range.
func checkConsumeTarget(cmd *cobra.Command, g *globalOptions, topic string, partition int32, exact int64) error {
	adm, cl, err := g.newAdmin()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := g.requestContext(cmd)
	defer cancel()
	if _, err := topicPartitions(ctx, adm, topic, partition); err != nil {
		return err
	}
	if exact < 0 {
		return nil
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("list offsets of topic %q: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("list offsets of topic %q: %w", topic, err)
	}
	s, ok1 := starts.Lookup(topic, partition)
	e, ok2 := ends.Lookup(topic, partition)
	if !ok1 || !ok2 || s.Err != nil || e.Err != nil {
		return fmt.Errorf("cannot check --offset %d: the broker did not list the offsets of topic %q partition %d",
			exact, topic, partition)
	}
	if exact < s.Offset || exact > e.Offset {
		return fmt.Errorf("offset %d is out of range for topic %q partition %d: start offsets go from %d (log start) to %d (log end)",
			exact, topic, partition, s.Offset, e.Offset)
	}
	return nil
}

// topicPartitions returns the number of partitions of topic, failing when
// the topic or (if partition >= 0) the partition does not exist.
func topicPartitions(ctx context.Context, adm *kadm.Client, topic string, partition int32) (int, error) {
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("look up topic %q: %w", topic, err)
	}
	td, ok := tds[topic]
	switch {
	case !ok || isUnknownTopic(td.Err):
		return 0, topicNotFoundError{topic}
	case td.Err != nil:
		return 0, brokerError(fmt.Sprintf("look up topic %q", topic), td.Err, "")
	}
	n := len(td.Partitions)
	if partition >= int32(n) {
		return 0, fmt.Errorf("topic %q has %d partitions (0 to %d); partition %d does not exist",
			topic, n, n-1, partition)
	}
	return n, nil
}

// consumeLoop polls and emits records until --max-messages is reached, no
// record arrives for --timeout-idle, ctx is cancelled (a clean exit), or the
// client reports an error it cannot recover from. It returns the number of
// records emitted. grp is nil without --group; with it, the records of
// each poll are marked for commit once written out, and --timeout-idle
// counts from when the group assigned this member its partitions.
func consumeLoop(ctx context.Context, cl *kgo.Client, o *consumeOptions, out *bufio.Writer, stderr io.Writer,
	emit func(*bufio.Writer, *kgo.Record) error, grp *groupHooks) (int64, error) {
	var n int64
	lastRecord := time.Now()
	for {
		joining := grp != nil && !grp.isJoined()
		pollCtx, cancel := ctx, context.CancelFunc(func() {})
		switch {
		case joining:
			// Poll (to see group errors) until the group is joined.
			pollCtx, cancel = context.WithCancel(ctx)
			go func() {
				select {
				case <-grp.joined:
					cancel()
				case <-pollCtx.Done():
				}
			}()
		case o.idle > 0:
			pollCtx, cancel = context.WithDeadline(ctx, lastRecord.Add(o.idle))
		}
		maxPoll := 0
		if o.maxMessages > 0 {
			maxPoll = int(min(o.maxMessages-n, 1<<20))
		}
		fs := cl.PollRecords(pollCtx, maxPoll)
		cancel()
		if joining && grp.isJoined() {
			lastRecord = time.Now()
		}

		var fatal error
		fs.EachError(func(topic string, partition int32, err error) {
			var (
				loss    *kgo.ErrDataLoss
				session *kgo.ErrGroupSession
			)
			switch {
			case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			case errors.As(err, &loss):
				fmt.Fprintf(stderr, "stele: warning: %v\n", err)
			case errors.As(err, &session) && !fatalGroupError(err):
				fmt.Fprintf(stderr, "stele: warning: %s: %v (retrying)\n", o.groupName(), session.Err)
			case errors.As(err, &session) && fatal == nil:
				fatal = fmt.Errorf("%s: %w", o.groupName(), session.Err)
			case fatal != nil:
			case isUnknownTopic(err):
				fatal = fmt.Errorf("consume topic %q: %w (was the topic deleted?)", topic, err)
			default:
				fatal = fmt.Errorf("consume topic %q partition %d: %w", topic, partition, err)
			}
		})
		var (
			werr    error
			emitted []*kgo.Record
		)
		before := n
		var unprinted []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if werr != nil || (o.maxMessages > 0 && n >= o.maxMessages) {
				unprinted = append(unprinted, r)
				return
			}
			if werr = emit(out, r); werr == nil {
				n++
				if grp != nil {
					emitted = append(emitted, r)
				}
			}
		})
		if n > before {
			lastRecord = time.Now()
		}
		if err := out.Flush(); err != nil && werr == nil {
			werr = err
		}
		if werr == nil && len(emitted) > 0 {
			grp.mark(emitted...)
		}
		if grp != nil && grp.share && len(unprinted) > 0 {
			// Received and not printed: for another member.
			for _, r := range unprinted {
				r.Ack(kgo.AckRelease)
			}
		}
		switch {
		case werr != nil:
			return n, fmt.Errorf("write record: %w", werr)
		case fatal != nil:
			return n, fatal
		case o.maxMessages > 0 && n >= o.maxMessages:
			return n, nil
		case ctx.Err() != nil:
			return n, nil // interrupted: a clean exit
		case o.idle > 0 && !joining && time.Since(lastRecord) >= o.idle:
			return n, nil
		}
	}
}

// groupName names the group of --group or --share-group for messages.
func (o *consumeOptions) groupName() string {
	if o.shareGroup != "" {
		return fmt.Sprintf("share group %q", o.shareGroup)
	}
	return fmt.Sprintf("consumer group %q", o.group)
}

// fatalGroupError reports whether a group management error is one a
// retry cannot fix (the Java consumer throws these too); kgo retries the
// others by itself, rejoining the group.
func fatalGroupError(err error) bool {
	for _, fatal := range []error{
		kerr.GroupAuthorizationFailed, kerr.TopicAuthorizationFailed, kerr.InvalidGroupID,
		kerr.UnsupportedVersion, kerr.InvalidSessionTimeout, kerr.GroupMaxSizeReached,
		kerr.InconsistentGroupProtocol, kerr.FencedInstanceID, kerr.UnsupportedAssignor,
	} {
		if errors.Is(err, fatal) {
			return true
		}
	}
	return false
}

// consumedRecord is the JSON form of one record printed by consume.
type consumedRecord struct {
	Topic     string           `json:"topic"`
	Partition int32            `json:"partition"`
	Offset    int64            `json:"offset"`
	Timestamp int64            `json:"timestamp"`
	Key       *string          `json:"key"`
	Value     *string          `json:"value"`
	Headers   []consumedHeader `json:"headers"`
	Encoding  string           `json:"encoding,omitempty"`
}

type consumedHeader struct {
	Key   string  `json:"key"`
	Value *string `json:"value"`
}

// emitJSON writes r as one JSON line (consumedOf).
func emitJSON(w *bufio.Writer, r *kgo.Record) error {
	b, err := json.Marshal(consumedOf(r))
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// consumedOf is r as --output json prints it. When the key, the value or
// a header value is not valid UTF-8, all three are base64 and Encoding
// says so.
func consumedOf(r *kgo.Record) consumedRecord {
	binary := !utf8.Valid(r.Key) || !utf8.Valid(r.Value)
	for _, h := range r.Headers {
		binary = binary || !utf8.Valid(h.Value)
	}
	enc := func(b []byte) *string {
		if b == nil {
			return nil
		}
		s := string(b)
		if binary {
			s = base64.StdEncoding.EncodeToString(b)
		}
		return &s
	}
	cr := consumedRecord{
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(),
		Key: enc(r.Key), Value: enc(r.Value), Headers: []consumedHeader{},
	}
	for _, h := range r.Headers {
		cr.Headers = append(cr.Headers, consumedHeader{Key: h.Key, Value: enc(h.Value)})
	}
	if binary {
		cr.Encoding = "base64"
	}
	return cr
}
