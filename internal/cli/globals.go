package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// globalOptions holds the persistent flags every command shares.
type globalOptions struct {
	brokers string
	output  *enumFlag
	timeout time.Duration
	// commandConfig is --command-config: Kafka client properties
	// (clientconfig.go).
	commandConfig string

	// root is the root command, to tell whether --brokers was given.
	root *cobra.Command
	// seeds is the broker list the last client was built with, for hints.
	seeds []string
}

func newGlobalOptions() *globalOptions {
	return &globalOptions{output: newEnumFlag("table", "table", "json")}
}

// register adds the global flags to root as persistent flags.
func (g *globalOptions) register(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&g.brokers, "brokers", defaultBrokers,
		"comma-separated host:port list of bootstrap brokers (env "+brokersEnv+")")
	f.Var(g.output, "output", "output format: table for people, json for scripts")
	f.DurationVar(&g.timeout, "timeout", defaultTimeout, "request timeout")
	f.StringVar(&g.commandConfig, "command-config", "", "Kafka client properties for TLS listeners: security.protocol=SSL, ssl.ca.location, ssl.certificate.location, ssl.key.location (as kafka-topics.sh --command-config)")
	g.root = root
}

// jsonOutput reports whether --output json was asked for.
func (g *globalOptions) jsonOutput() bool { return g.output.String() == "json" }

// seedBrokers resolves the broker list: --brokers if given, else
// $STELE_BROKERS if set, else the default.
func (g *globalOptions) seedBrokers() ([]string, error) {
	raw := g.brokers
	if fl := g.root.PersistentFlags().Lookup("brokers"); fl != nil && !fl.Changed {
		if env := strings.TrimSpace(os.Getenv(brokersEnv)); env != "" {
			raw = env
		}
	}
	var seeds []string
	for _, s := range strings.Split(raw, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		host, port, err := net.SplitHostPort(s)
		if err != nil || host == "" {
			return nil, usageErrorf("invalid broker address %q: want host:port, e.g. 127.0.0.1:9092", s)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return nil, usageErrorf("invalid broker address %q: port must be a number from 1 to 65535", s)
		}
		seeds = append(seeds, s)
	}
	if len(seeds) == 0 {
		return nil, usageErrorf("no brokers given: set --brokers or %s to host:port[,host:port...]", brokersEnv)
	}
	return seeds, nil
}

// validate checks the global flags that flag parsing cannot check alone.
func (g *globalOptions) validate() error {
	if g.timeout <= 0 {
		return usageErrorf("invalid --timeout %v: must be positive, e.g. 30s", g.timeout)
	}
	return nil
}

// newClient returns a kgo client for the resolved brokers with opts added.
func (g *globalOptions) newClient(opts ...kgo.Opt) (*kgo.Client, error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	seeds, err := g.seedBrokers()
	if err != nil {
		return nil, err
	}
	g.seeds = seeds
	security, err := g.securityOpts()
	if err != nil {
		return nil, err
	}
	all := append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID("stele-cli"),
		kgo.DialTimeout(min(g.timeout, 10*time.Second)),
	}, security...)
	all = append(all, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("cannot build a Kafka client: %w", err)
	}
	return cl, nil
}

// securityOpts are the client options --command-config gives (none
// without it).
func (g *globalOptions) securityOpts() ([]kgo.Opt, error) {
	if g.commandConfig == "" {
		return nil, nil
	}
	props, err := readProperties(g.commandConfig)
	if err != nil {
		return nil, usageError{err}
	}
	return clientTLSOpts(props)
}

// newAdmin returns an admin client whose broker-side operation timeout is
// --timeout. Close the returned kgo client when done.
func (g *globalOptions) newAdmin() (*kadm.Client, *kgo.Client, error) {
	cl, err := g.newClient()
	if err != nil {
		return nil, nil, err
	}
	adm := kadm.NewClient(cl)
	adm.SetTimeoutMillis(int32(min(g.timeout.Milliseconds(), int64(1<<31-1))))
	return adm, cl, nil
}

// requestContext bounds one admin operation by --timeout.
func (g *globalOptions) requestContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), g.timeout)
}

// roundTrip sends one request to the brokers with a fresh admin client,
// under the command's deadline, and returns its response.
func (g *globalOptions) roundTrip(cmd *cobra.Command, req kmsg.Request) (kmsg.Response, error) {
	_, cl, err := g.newAdmin()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := g.requestContext(cmd)
	defer cancel()
	return cl.Request(ctx, req)
}

// connectionHint returns advice for errors that mean no broker answered, or
// "" for other errors.
func (g *globalOptions) connectionHint(err error) string {
	var opErr *net.OpError
	if !errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &opErr) {
		return ""
	}
	brokers := strings.Join(g.seeds, ",")
	if brokers == "" {
		brokers = g.brokers
	}
	return fmt.Sprintf("hint: could not reach a broker at %s (--timeout %v); check --brokers (or %s), "+
		"that a broker is running there, or raise --timeout", brokers, g.timeout, brokersEnv)
}

// enumFlag is a string flag restricted to a fixed set of values; a value
// outside the set is a usage error at parse time.
type enumFlag struct {
	value   string
	allowed []string
}

func newEnumFlag(def string, allowed ...string) *enumFlag {
	return &enumFlag{value: def, allowed: allowed}
}

// Set implements pflag.Value.
func (e *enumFlag) Set(s string) error {
	for _, a := range e.allowed {
		if s == a {
			e.value = s
			return nil
		}
	}
	return fmt.Errorf("must be one of %s", strings.Join(e.allowed, "|"))
}

// String implements pflag.Value.
func (e *enumFlag) String() string { return e.value }

// Type implements pflag.Value; help shows it as the value placeholder.
func (e *enumFlag) Type() string { return strings.Join(e.allowed, "|") }
