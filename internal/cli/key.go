package cli

// stele key get: a key's events, read over the native HTTP API
// (docs/keys.md).

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/httpapi"
)

const (
	httpEnv     = "STELE_HTTP"
	defaultHTTP = "127.0.0.1:8080"
)

func newKeyCmd(g *globalOptions) *cobra.Command {
	return newGroupCmd("key", "Read a key's stream of events, list keys (the native HTTP API)", newKeyGetCmd(g), newKeyListCmd(g))
}

func newKeyGetCmd(g *globalOptions) *cobra.Command {
	var (
		httpAddr string
		from     int64
		limit    int
		follow   bool
	)
	c := &cobra.Command{
		Use:   "get TOPIC KEY",
		Short: "Print a key's events in order, from a version on",
		Long: `Print the events of KEY in TOPIC, in order: from the key's latest snapshot
record when it has one (a record marked with the stele-snapshot header,
which stands for everything before it), else from its first event; or
from offset --from on. The broker finds them in its key index, without
scanning the partition. With --follow, keep printing new events as they
are committed, until interrupted.

The events are read from a broker's HTTP API (--http, or the STELE_HTTP
environment variable), not its Kafka port. The table shows values as text
when they are UTF-8, base64 otherwise; --output json prints one JSON event
per line, as GET /v1/topics/{topic}/keys/{key}/events returns them.`,
		Example: `  stele key get accounts acct-42
  stele key get accounts acct-42 --from 1200 --follow
  STELE_HTTP=10.0.0.5:8080 stele key get accounts acct-42 --output json`,
		Args: exactArgs("TOPIC", "KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from < 0 {
				return usageErrorf("invalid --from %d: an offset is 0 or more", from)
			}
			if !cmd.Flags().Changed("from") {
				from = -1 // the broker starts at the key's latest snapshot
			}
			if limit < 1 || limit > 10_000 {
				return usageErrorf("invalid --limit %d: 1 to 10000 events per request", limit)
			}
			addr, err := httpAddress(cmd, httpAddr)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			paged, err := g.httpClient(g.timeout)
			if err != nil {
				return err
			}
			streaming, err := g.httpClient(0)
			if err != nil {
				return err
			}
			k := &keyReader{base: httpBase(addr) + "/v1/topics/" + url.PathEscape(args[0]) + "/keys/" + url.PathEscape(args[1]) + "/events",
				out: cmd.OutOrStdout(), json: g.jsonOutput(), paged: paged, streaming: streaming}
			if follow {
				err := k.follow(ctx, from)
				if ctx.Err() != nil {
					return nil // interrupted: the normal end of a follow
				}
				return err
			}
			return k.pages(ctx, from, limit)
		},
	}
	f := c.Flags()
	f.StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	f.Int64Var(&from, "from", 0, "the first offset (version) to print (default: the key's latest snapshot, else its first event)")
	f.IntVar(&limit, "limit", 1000, "events per request")
	f.BoolVar(&follow, "follow", false, "keep printing new events as they are committed")
	return c
}

// keyTableHeader heads `key get`'s table.
const keyTableHeader = "PARTITION\tOFFSET\tTIMESTAMP\tVALUE\tSNAPSHOT"

// keyReader prints a key's events as they come from the HTTP API.
type keyReader struct {
	base string
	out  io.Writer
	json bool
	// paged reads pages (--timeout each), streaming follows (no timeout).
	paged, streaming *http.Client
	header           bool // the table header is out
}

// query is the query string asking for events from offset from on (from
// -1: where the broker starts, the key's latest snapshot).
func query(from int64, limit int) string {
	q := url.Values{}
	if from >= 0 {
		q.Set("from", strconv.FormatInt(from, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return "?" + q.Encode()
}

// pages reads every event from offset from on (-1: from the key's latest
// snapshot), a page at a time.
func (k *keyReader) pages(ctx context.Context, from int64, limit int) error {
	for {
		req, err := http.NewRequestWithContext(ctx, "GET", k.base+query(from, limit), nil)
		if err != nil {
			return err
		}
		resp, err := k.paged.Do(req)
		if err != nil {
			return fmt.Errorf("reading the key's events: %w", err)
		}
		var page httpapi.KeyEventsPage
		err = decodeAPI(resp, &page)
		if err != nil {
			return err
		}
		for _, e := range page.Events {
			if err := k.print(e); err != nil {
				return err
			}
		}
		if len(page.Events) < limit {
			return k.flushHeader()
		}
		from = page.Next
	}
}

// follow prints the events from offset from on, then new ones as they
// come, over Server-Sent Events, reconnecting (with Last-Event-ID) when
// the stream breaks.
func (k *keyReader) follow(ctx context.Context, from int64) error {
	last := from - 1 // -2: nothing printed yet, start where the broker does
	for {
		err := k.stream(ctx, &last)
		if ctx.Err() != nil {
			return err
		}
		var apiErr apiError
		if errors.As(err, &apiErr) {
			return err // the broker refused: reconnecting will not help
		}
		fmt.Fprintf(os.Stderr, "stele: the event stream broke (%v); reconnecting\n", err)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil
		}
	}
}

func (k *keyReader) stream(ctx context.Context, last *int64) error {
	req, err := http.NewRequestWithContext(ctx, "GET", k.base+query(max(*last+1, -1), 0), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := k.streaming.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeAPI(resp, nil)
	}
	if err := k.flushHeader(); err != nil {
		return err
	}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		data, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "data: ")
		if !ok {
			continue // id, event and comment lines
		}
		var e httpapi.KeyEvent
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return fmt.Errorf("an event the broker sent does not decode: %w", err)
		}
		if err := k.print(e); err != nil {
			return err
		}
		*last = e.Offset
		if f, ok := k.out.(interface{ Flush() error }); ok {
			f.Flush()
		}
	}
}

func (k *keyReader) print(e httpapi.KeyEvent) error {
	if k.json {
		return json.NewEncoder(k.out).Encode(e)
	}
	if !k.header {
		if _, err := fmt.Fprintln(k.out, keyTableHeader); err != nil {
			return err
		}
		k.header = true
	}
	ts := time.UnixMilli(e.Timestamp).UTC().Format(time.RFC3339Nano)
	snap := ""
	if e.Snapshot {
		snap = "yes"
	}
	_, err := fmt.Fprintf(k.out, "%d\t%d\t%s\t%s\t%s\n", e.Partition, e.Offset, ts, showBytes(e.Value), snap)
	return err
}

// flushHeader prints the table header of a read that found no event.
func (k *keyReader) flushHeader() error {
	if k.json || k.header {
		return nil
	}
	k.header = true
	_, err := fmt.Fprintln(k.out, keyTableHeader)
	return err
}

// showBytes is a value for the table: its text when it is UTF-8, "null"
// for a tombstone, base64 otherwise.
func showBytes(b *httpapi.Bytes) string {
	switch {
	case b == nil:
		return "null"
	case utf8.Valid(*b):
		return strconv.Quote(string(*b))
	}
	return "base64:" + base64.StdEncoding.EncodeToString(*b)
}

// apiError is an error answer of the HTTP API.
type apiError struct {
	status int
	msg    string
}

func (e apiError) Error() string { return fmt.Sprintf("the broker answered %d: %s", e.status, e.msg) }

// decodeAPI decodes a 200 answer into v, or returns the API's error.
func decodeAPI(resp *http.Response, v any) error {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var body struct {
			Error string `json:"error"`
		}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(data, &body) != nil || body.Error == "" {
			body.Error = strings.TrimSpace(string(data))
		}
		return apiError{resp.StatusCode, body.Error}
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("the broker's answer does not decode: %w", err)
	}
	return nil
}

func newKeyListCmd(g *globalOptions) *cobra.Command {
	var (
		httpAddr, prefix string
		limit            int
	)
	c := &cobra.Command{
		Use:   "list TOPIC",
		Short: "List a topic's keys in byte order, optionally by prefix",
		Long: `Print the keys of TOPIC that have a record in the log, one per line, in
byte order, read from a broker's key index over its HTTP API (--http, or
STELE_HTTP). Keys print as quoted text when they are UTF-8, base64
otherwise; --output json prints one JSON key per line ({"utf8": ...} or
{"b64": ...}).`,
		Example: `  stele key list accounts
  stele key list accounts --prefix acct-4`,
		Args: exactArgs("TOPIC"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > 10_000 {
				return usageErrorf("invalid --limit %d: 1 to 10000 keys per request", limit)
			}
			addr, err := httpAddress(cmd, httpAddr)
			if err != nil {
				return err
			}
			base := httpBase(addr) + "/v1/topics/" + url.PathEscape(args[0]) + "/keys"
			cl, err := g.httpClient(g.timeout)
			if err != nil {
				return err
			}
			q := url.Values{"prefix": {prefix}, "limit": {strconv.Itoa(limit)}}
			out := cmd.OutOrStdout()
			for {
				req, err := http.NewRequestWithContext(cmd.Context(), "GET", base+"?"+q.Encode(), nil)
				if err != nil {
					return err
				}
				resp, err := cl.Do(req)
				if err != nil {
					return fmt.Errorf("listing the keys: %w", err)
				}
				var page httpapi.KeysPage
				if err := decodeAPI(resp, &page); err != nil {
					return err
				}
				for _, k := range page.Keys {
					if g.jsonOutput() {
						if err := json.NewEncoder(out).Encode(k); err != nil {
							return err
						}
						continue
					}
					if _, err := fmt.Fprintln(out, showBytes(&k)); err != nil {
						return err
					}
				}
				if page.After == nil {
					return nil
				}
				q.Set("after", string(*page.After))
			}
		},
	}
	f := c.Flags()
	f.StringVar(&httpAddr, "http", defaultHTTP, "a broker's HTTP API host:port (env "+httpEnv+")")
	f.StringVar(&prefix, "prefix", "", "only keys starting with this")
	f.IntVar(&limit, "limit", 1000, "keys per request")
	return c
}

// httpAddress resolves the HTTP API address: --http if given, else
// $STELE_HTTP if set, else the default.
func httpAddress(cmd *cobra.Command, flag string) (string, error) {
	addr := flag
	if fl := cmd.Flags().Lookup("http"); fl != nil && !fl.Changed {
		if env := strings.TrimSpace(os.Getenv(httpEnv)); env != "" {
			addr = env
		}
	}
	hostPort := strings.TrimPrefix(strings.TrimPrefix(addr, "https://"), "http://")
	if _, _, err := net.SplitHostPort(strings.TrimSuffix(hostPort, "/")); err != nil {
		return "", usageErrorf("invalid HTTP address %q: want host:port, or https://host:port for a broker serving TLS (--http-tls), e.g. %s", addr, defaultHTTP)
	}
	return addr, nil
}
