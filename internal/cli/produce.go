package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/stele-io/stele/pkg/proof"
	"github.com/stele-io/stele/pkg/stele"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceOptions are the flags of `stele produce`.
type produceOptions struct {
	file        string
	keySep      string
	headers     []string
	partition   int32
	acks        *enumFlag
	compression *enumFlag
	linger      time.Duration
	signKey     string // --sign: the producer key file
	principal   string // --principal
}

// produceSummary is the JSON form of produce's result (written to stdout with
// --output json; the human summary always goes to stderr).
type produceSummary struct {
	Topic      string `json:"topic"`
	Records    int64  `json:"records"`
	Bytes      int64  `json:"bytes"`
	Failed     int64  `json:"failed"`
	FirstError string `json:"first_error,omitempty"`
}

func newProduceCmd(g *globalOptions) *cobra.Command {
	o := &produceOptions{
		acks:        newEnumFlag("-1", "-1", "all", "0", "1"),
		compression: newEnumFlag("none", "none", "gzip", "snappy", "lz4", "zstd"),
	}
	c := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Produce one record per input line (kafka-console-producer.sh)",
		Long: `Produce one record per line of stdin, or of --file (kafka-console-producer.sh).
A trailing \n or \r\n is not part of the record; an empty line is an empty
record.

With --key-separator each line is split into key and value at the first
separator; a line without it stops the command with an error naming the line,
as kafka-console-producer.sh does (records before it are still produced).

The topic must exist, unless the broker creates topics on demand
(auto.create.topics.enable): then produce creates it, as the Kafka console
producer does.

A summary (records produced, bytes, errors) is printed on stderr. The command
exits 1 if any record failed, after printing the first error. On SIGINT it
stops reading and waits for the records already read.

--sign FILE --principal NAME signs every record with NAME's key (registered
with stele producer-key register): a header stele-signature the brokers verify
before writing the record, so that none of them can alter, forge or replay it
(docs/signed-producers.md). The signatures name the cluster's chain (v2) when
it runs app version 2 or later, as every new cluster does, and no chain (v1) before.`,
		Example: `  printf 'k1:hello\nk2:world\n' | stele produce orders --key-separator : --header source=cli
  stele produce orders --file events.txt --compression zstd --acks all`,
		Args: exactArgs("TOPIC"),
		RunE: func(cmd *cobra.Command, a []string) error {
			return runProduce(cmd, g, o, a[0])
		},
	}
	f := c.Flags()
	f.StringVar(&o.file, "file", "", "read records from this file instead of stdin")
	f.StringVar(&o.keySep, "key-separator", "", "split each line into key and value at the first occurrence of this string")
	f.StringArrayVar(&o.headers, "header", nil, "add header key=value to every record (repeatable)")
	f.Int32Var(&o.partition, "partition", -1, "produce to this partition (default: the client's partitioner, by key hash)")
	f.Var(o.acks, "acks", "acknowledgements: -1/all waits for every in-sync replica, 1 for the leader, 0 for none")
	f.Var(o.compression, "compression", "batch compression codec")
	f.DurationVar(&o.linger, "linger", 10*time.Millisecond, "how long to wait for more records before sending a batch")
	f.StringVar(&o.signKey, "sign", "", "sign every record with the producer key in this file (stele producer-key generate; docs/signed-producers.md)")
	f.StringVar(&o.principal, "principal", "", "with --sign: the principal the key is registered for")
	return c
}

// clientOpts returns the kgo producer options for the flags.
func (o *produceOptions) clientOpts(topic string, timeout time.Duration) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(o.linger),
		kgo.RecordDeliveryTimeout(max(timeout, time.Second)),
		kgo.ProduceRequestTimeout(max(timeout, time.Second)),
	}
	switch o.acks.String() {
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	default:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	codec := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}[o.compression.String()]
	opts = append(opts, kgo.ProducerBatchCompression(codec))
	if o.partition >= 0 {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	return opts
}

func runProduce(cmd *cobra.Command, g *globalOptions, o *produceOptions, topic string) error {
	switch {
	case cmd.Flags().Changed("key-separator") && o.keySep == "":
		return usageErrorf("--key-separator must not be empty")
	case o.partition < -1:
		return usageErrorf("invalid --partition %d: partitions are numbered from 0", o.partition)
	case o.linger < 0:
		return usageErrorf("invalid --linger %v: must be 0 or more", o.linger)
	case (o.signKey == "") != (o.principal == ""):
		return usageErrorf("--sign and --principal go together")
	}
	var headers []kgo.RecordHeader
	for _, h := range o.headers {
		k, v, err := parseKeyValue(h, "--header")
		if err != nil {
			return err
		}
		headers = append(headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}

	in, size := cmd.InOrStdin(), int64(0)
	if o.file != "" {
		f, err := os.Open(o.file)
		if err != nil {
			return fmt.Errorf("cannot read --file: %w", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil {
			size = fi.Size()
		}
		in = f
	}

	if err := checkProduceTarget(cmd, g, topic, o.partition); err != nil {
		return err
	}
	cl, err := g.newClient(o.clientOpts(topic, g.timeout)...)
	if err != nil {
		return err
	}
	defer cl.Close()

	var prog *progress
	if o.file != "" && isTerminal(cmd.ErrOrStderr()) {
		prog = startProgress(cmd.ErrOrStderr(), size)
	}
	p := &producer{cl: cl, opts: o, headers: headers, prog: prog, topic: topic}
	if o.signKey != "" {
		if p.signKey, err = readProducerKey(o.signKey); err != nil {
			return err
		}
		if err := proof.ValidPrincipal(o.principal); err != nil {
			return usageError{err}
		}
		ctx, cancel := g.requestContext(cmd)
		p.chain, err = stele.SignatureChain(ctx, cl)
		cancel()
		if err != nil {
			return err
		}
	}
	begin := time.Now()
	readErr := p.run(cmd.Context(), in)
	prog.stop()
	return p.report(cmd, g, topic, time.Since(begin), readErr)
}

// checkProduceTarget fails early when the topic or partition does not
// exist. Like the producer of kafka-console-producer.sh, its Metadata
// request allows auto-creation, so a broker with auto.create.topics.enable
// creates the topic here; it then waits (within --timeout) until the new
// topic has leaders.
func checkProduceTarget(cmd *cobra.Command, g *globalOptions, topic string, partition int32) error {
	cl, err := g.newClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := g.requestContext(cmd)
	defer cancel()
	for {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		req.AllowAutoTopicCreation = true
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return fmt.Errorf("look up topic %q: %w", topic, err)
		}
		if len(resp.Topics) != 1 {
			return fmt.Errorf("look up topic %q: the broker answered for %d topics, want 1", topic, len(resp.Topics))
		}
		t := resp.Topics[0]
		err = kerr.ErrorForCode(t.ErrorCode)
		switch {
		case err == nil:
			if n := len(t.Partitions); partition >= int32(n) {
				return fmt.Errorf("topic %q has %d partitions (0 to %d); partition %d does not exist",
					topic, n, n-1, partition)
			}
			return nil
		case isUnknownTopic(err):
			return topicNotFoundError{topic}
		case !kerr.IsRetriable(err):
			return brokerError(fmt.Sprintf("look up topic %q", topic), err, "")
		}
		select { // a topic just created has no leader yet: ask again
		case <-ctx.Done():
			return fmt.Errorf("look up topic %q: %w (last answer: %w)", topic, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// producer turns input lines into records and counts the outcome.
type producer struct {
	cl      *kgo.Client
	opts    *produceOptions
	headers []kgo.RecordHeader
	prog    *progress
	topic   string
	signKey ed25519.PrivateKey // --sign
	chain   string             // with --sign: the chain the signatures name ("": v1)
	seq     uint64             // the last signature sequence (record is called by one goroutine)

	mu struct {
		sync.Mutex
		produced, failed, bytes int64
		firstErr                error
	}
}

// line is one input line, without its terminator, and how many input bytes
// it used.
type line struct {
	data []byte
	size int64
}

// run reads lines from in and produces them until the input ends, a line
// cannot be parsed (returned as the error), reading fails, or ctx is
// cancelled; then it waits for every record handed to the client.
//
// Lines are read by a goroutine so that an interrupt is noticed while a
// read from an interactive terminal blocks. run signals it to stop but waits
// for it only when the input ended: a read from a terminal cannot be
// interrupted, and that goroutine ends with the process.
func (p *producer) run(ctx context.Context, in io.Reader) error {
	lines := make(chan line, 64)
	stop := make(chan struct{})
	var readErr error // written by the reader before it closes lines
	go func() {
		defer close(lines)
		r := bufio.NewReaderSize(in, 64<<10)
		for {
			b, err := r.ReadBytes('\n')
			if len(b) > 0 {
				size := int64(len(b))
				b = bytes.TrimSuffix(b, []byte("\n"))
				b = bytes.TrimSuffix(b, []byte("\r"))
				select {
				case lines <- line{data: b, size: size}:
				case <-stop:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					readErr = fmt.Errorf("read input: %w", err)
				}
				return
			}
		}
	}()

	recCtx := context.WithoutCancel(ctx) // an interrupt must not fail records already read
	var (
		lineNo int64
		err    error
	)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case l, ok := <-lines:
			if !ok {
				err = readErr
				break loop
			}
			lineNo++
			p.prog.addRead(l.size)
			rec, perr := p.record(l.data, lineNo)
			if perr != nil {
				err = perr
				break loop
			}
			n := lineNo
			p.cl.Produce(recCtx, rec, func(r *kgo.Record, err error) { p.done(r, n, err) })
		}
	}
	close(stop)
	// Flush returns once every record has been acknowledged or has failed;
	// RecordDeliveryTimeout (--timeout) bounds how long that takes.
	if ferr := p.cl.Flush(recCtx); ferr != nil && err == nil {
		err = fmt.Errorf("flush: %w", ferr)
	}
	return err
}

// record builds the record for one input line.
func (p *producer) record(data []byte, lineNo int64) (*kgo.Record, error) {
	rec := &kgo.Record{Value: data, Headers: p.headers}
	if p.opts.keySep != "" {
		k, v, ok := bytes.Cut(data, []byte(p.opts.keySep))
		if !ok {
			return nil, fmt.Errorf("no key separator %q found on line %d: %q", p.opts.keySep, lineNo, truncate(data, 80))
		}
		rec.Key, rec.Value = k, v
	}
	if p.opts.partition >= 0 {
		rec.Partition = p.opts.partition
	}
	if p.signKey != nil {
		hs := make([]proof.RecordHeader, len(rec.Headers))
		for i, h := range rec.Headers {
			hs[i] = proof.RecordHeader{Key: h.Key, Value: h.Value}
		}
		sig := proof.SignRecordFor(p.signKey, p.chain, p.opts.principal, p.nextSeq(), p.topic, rec.Key, rec.Value, hs)
		rec.Headers = append(slices.Clip(rec.Headers), kgo.RecordHeader{Key: proof.SignatureHeader, Value: []byte(sig)})
	}
	return rec, nil
}

// nextSeq is the signature sequence of the next record: the time in
// nanoseconds, and always above the last, so that sequences stay unique
// across runs of one principal on one machine (the cluster refuses one
// used before).
func (p *producer) nextSeq() uint64 {
	p.seq = max(p.seq+1, uint64(time.Now().UnixNano()))
	return p.seq
}

// done is the promise of every record.
func (p *producer) done(r *kgo.Record, lineNo int64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.mu.failed++
		if p.mu.firstErr == nil {
			p.mu.firstErr = fmt.Errorf("the record of line %d was not produced: %w", lineNo, err)
		}
		return
	}
	p.mu.produced++
	p.mu.bytes += int64(len(r.Key) + len(r.Value))
	p.prog.addRecord()
}

// report prints the summary and returns the error the command exits with.
func (p *producer) report(cmd *cobra.Command, g *globalOptions, topic string, took time.Duration, runErr error) error {
	p.mu.Lock()
	s := produceSummary{Topic: topic, Records: p.mu.produced, Bytes: p.mu.bytes, Failed: p.mu.failed}
	firstErr := p.mu.firstErr
	p.mu.Unlock()
	if err := errors.Join(firstErr, runErr); err != nil {
		s.FirstError = err.Error()
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "Produced %s (%s) to topic %q in %v; %d failed.\n",
		plural(s.Records, "record"), humanBytes(s.Bytes), topic, took.Round(time.Millisecond), s.Failed)
	if g.jsonOutput() {
		if err := writeJSON(cmd.OutOrStdout(), s); err != nil {
			return err
		}
	}
	if s.Failed > 1 {
		firstErr = fmt.Errorf("%d records were not produced; the first: %w", s.Failed, firstErr)
	}
	return errors.Join(firstErr, runErr)
}

// truncate shortens b for an error message.
func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}

// plural formats n and noun, adding an s unless n is 1.
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
