package cli

// Subjects over the native HTTP API (docs/subjects.md): `stele consume
// TOPIC --subject PATTERN` and `stele subject list TOPIC`.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stele-io/stele/internal/httpapi"
	"github.com/stele-io/stele/internal/subject"
)

func newSubjectCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("subject", "List the subjects of a topic (the native HTTP API)", newSubjectListCmd(g))
}

func newSubjectListCmd(g *globalOptions) *cobra.Command {
	var (
		httpAddr, prefix string
		limit            int
	)
	c := &cobra.Command{
		Use:   "list TOPIC",
		Short: "List the subjects seen in a topic, with their record counts",
		Long: `Print the subjects of TOPIC's records, in byte order, with how many
records were given each (whether retention, compaction or an aborted
transaction has removed some since), read from a broker's HTTP API
(--http, or STELE_HTTP). --prefix keeps a subject and those under it, by
whole tokens: orders.eu lists orders.eu and orders.eu.fr, not
orders.europe. --output json prints one JSON object per line.`,
		Example: `  stele subject list orders
  stele subject list orders --prefix orders.eu`,
		Args: exactArgs("TOPIC"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > 10_000 {
				return usageErrorf("invalid --limit %d: 1 to 10000 subjects per request", limit)
			}
			if prefix != "" {
				if err := subject.Check([]byte(prefix)); err != nil {
					return usageErrorf("invalid --prefix %q: %v", prefix, err)
				}
			}
			addr, err := httpAddress(cmd, httpAddr)
			if err != nil {
				return err
			}
			cl, err := g.httpClient(g.timeout)
			if err != nil {
				return err
			}
			base := httpBase(addr) + "/v1/topics/" + url.PathEscape(args[0]) + "/subjects"
			q := url.Values{"prefix": {prefix}, "limit": {strconv.Itoa(limit)}}
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			if !g.jsonOutput() {
				fmt.Fprintln(out, "SUBJECT\tRECORDS")
			}
			for {
				req, err := http.NewRequestWithContext(cmd.Context(), "GET", base+"?"+q.Encode(), nil)
				if err != nil {
					return err
				}
				resp, err := cl.Do(req)
				if err != nil {
					return fmt.Errorf("listing the subjects: %w", err)
				}
				var page httpapi.SubjectsPage
				if err := decodeAPI(resp, &page); err != nil {
					return err
				}
				for _, s := range page.Subjects {
					if g.jsonOutput() {
						b, _ := json.Marshal(s)
						fmt.Fprintf(out, "%s\n", b)
					} else {
						fmt.Fprintf(out, "%s\t%d\n", s.Subject, s.Records)
					}
				}
				if page.Next == "" {
					return nil
				}
				q.Set("after", page.Next)
			}
		},
	}
	f := c.Flags()
	f.StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	f.StringVar(&prefix, "prefix", "", "only this subject and those under it (whole tokens)")
	f.IntVar(&limit, "limit", 1000, "subjects per request")
	return c
}

// runSubjectConsume is `stele consume TOPIC --subject PATTERN`: the
// records whose subject matches, filtered by the broker, followed over
// Server-Sent Events from a broker's HTTP API (--http), reconnecting with
// Last-Event-ID when the stream breaks.
func runSubjectConsume(cmd *cobra.Command, g *globalOptions, o *consumeOptions, topic string) error {
	switch {
	case o.group != "":
		return usageErrorf("--subject does not go with --group: a group reads a view (stele view create) or the whole topic")
	case o.verify || o.quorum:
		return usageErrorf("--subject does not go with --verify or --quorum yet")
	case cmd.Flags().Changed("isolation") && o.isolation.String() != "read_committed":
		return usageErrorf("--subject reads committed records only (read_committed)")
	case cmd.Flags().Changed("genesis"):
		return usageErrorf("--genesis goes with --verify")
	}
	if err := o.validate(cmd, g); err != nil {
		return err
	}
	if _, err := subject.ParsePattern(o.subject); err != nil {
		return usageErrorf("invalid --subject %q: %v", o.subject, err)
	}
	if o.format == formatJSON {
		return usageErrorf("--format json does not go with --subject yet: GET /v1/topics/{topic}/records?subject=P&format=json decodes by subject (docs/schemas.md)")
	}
	format, err := parseFormat(o.format)
	if err != nil {
		return usageError{err}
	}
	addr, err := httpAddress(cmd, o.trust.httpAddr)
	if err != nil {
		return err
	}
	cl, err := g.httpClient(0)
	if err != nil {
		return err
	}
	q := url.Values{"subject": {o.subject}}
	switch {
	case o.partition >= 0 && o.offset != "" && o.offset != "earliest" && o.offset != "latest":
		n, err := strconv.ParseInt(o.offset, 10, 64)
		if err != nil || n < 0 {
			return usageErrorf("invalid --offset %q: want N, earliest or latest", o.offset)
		}
		q.Set("from", strconv.FormatInt(n, 10))
	case o.offset != "":
		q.Set("from", o.offset)
	case o.fromBeginning:
		q.Set("from", "earliest")
	default:
		q.Set("from", "latest")
	}
	if o.partition >= 0 {
		q.Set("partition", strconv.Itoa(int(o.partition)))
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := bufio.NewWriter(cmd.OutOrStdout())
	emit := emitJSON
	if !g.jsonOutput() {
		var buf []byte
		emit = func(w *bufio.Writer, r *kgo.Record) error {
			buf = format.append(buf[:0], r)
			_, err := w.Write(buf)
			return err
		}
	}
	s := &subjectStream{url: httpBase(addr) + "/v1/topics/" + url.PathEscape(topic) + "/records?" + q.Encode(), topic: topic,
		cl: cl, out: out, emit: emit, max: o.maxMessages, idle: o.idle}
	err = s.run(ctx)
	out.Flush()
	fmt.Fprintf(cmd.ErrOrStderr(), "Processed a total of %d messages\n", s.n)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil // interrupted: the normal end of a consume
	}
	return err
}

// subjectStream follows a read by subject.
type subjectStream struct {
	url, topic string
	cl         *http.Client
	out        *bufio.Writer
	emit       func(*bufio.Writer, *kgo.Record) error
	max        int64         // stop after this many records (0: never)
	idle       time.Duration // stop after this long without a record (0: never)
	n          int64
	lastID     string // the cursor after the last record printed
}

// errDone ends a stream that printed what it was asked for.
var errDone = errors.New("done")

func (s *subjectStream) run(ctx context.Context) error {
	for {
		err := s.stream(ctx)
		if errors.Is(err, errDone) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var apiErr apiError
		if errors.As(err, &apiErr) {
			return err // the broker refused: reconnecting will not help
		}
		fmt.Fprintf(os.Stderr, "stele: the record stream broke (%v); reconnecting\n", err)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stream reads one connection's events until it breaks, the context ends,
// or the stream has printed what it was asked for (errDone).
func (s *subjectStream) stream(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if s.lastID != "" {
		req.Header.Set("Last-Event-ID", s.lastID)
	}
	resp, err := s.cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeAPI(resp, nil)
	}
	type line struct {
		text string
		err  error
	}
	lines := make(chan line)
	go func() {
		r := bufio.NewReader(resp.Body)
		for {
			t, err := r.ReadString('\n')
			select {
			case lines <- line{t, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var idle <-chan time.Time
	var timer *time.Timer
	if s.idle > 0 {
		timer = time.NewTimer(s.idle)
		defer timer.Stop()
		idle = timer.C
	}
	id := ""
	for {
		var l line
		select {
		case l = <-lines:
		case <-idle:
			return errDone
		case <-ctx.Done():
			return ctx.Err()
		}
		if l.err != nil {
			return l.err
		}
		text := strings.TrimSuffix(l.text, "\n")
		if v, ok := strings.CutPrefix(text, "id: "); ok {
			id = v
			continue
		}
		data, ok := strings.CutPrefix(text, "data: ")
		if !ok {
			continue // event and comment lines
		}
		var rec httpapi.SubjectRecord
		if err := json.Unmarshal([]byte(data), &rec); err != nil {
			return fmt.Errorf("a record the broker sent does not decode: %w", err)
		}
		if err := s.emit(s.out, s.kgoRecord(rec)); err != nil {
			return err
		}
		s.out.Flush()
		s.n++
		s.lastID = id
		if s.max > 0 && s.n >= s.max {
			return errDone
		}
		if timer != nil {
			timer.Reset(s.idle)
		}
	}
}

// kgoRecord is rec as consume's formats print a record.
func (s *subjectStream) kgoRecord(rec httpapi.SubjectRecord) *kgo.Record {
	r := &kgo.Record{Topic: s.topic, Partition: rec.Partition, Offset: rec.Offset, Timestamp: time.UnixMilli(rec.Timestamp)}
	if rec.Key != nil {
		r.Key = []byte(*rec.Key)
	}
	if rec.Value != nil {
		r.Value = []byte(*rec.Value)
	}
	for _, h := range rec.Headers {
		kh := kgo.RecordHeader{Key: h.Key}
		if h.Value != nil {
			kh.Value = []byte(*h.Value)
		}
		r.Headers = append(r.Headers, kh)
	}
	return r
}
