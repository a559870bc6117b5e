// Package cli builds the stele command tree.
//
// Every command except serve is a plain Kafka client (franz-go's kgo and
// kadm) and works against any Kafka-compatible broker, Apache Kafka
// included. The commands mirror Kafka's own tools (kafka-topics.sh,
// kafka-console-producer.sh, kafka-console-consumer.sh, kafka-configs.sh,
// kafka-dump-log.sh) in naming and behaviour where that is sensible.
//
// New builds the whole tree with no package-level state, so tests run
// commands in-process with their own stdin, stdout and stderr; Run executes
// one command line and maps its outcome to an exit code: 0 on success,
// ExitFailure when the command ran and failed, ExitUsage when the command
// line itself was wrong, ExitUpgradeRequired when serve stopped for an
// upgrade this binary cannot run.
//
// Dependencies: cli may import every other internal package (it sits at the
// top of DESIGN.md §2); nothing imports cli except cmd/stele.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/server"
)

// Exit codes returned by Run and Main.
const (
	// ExitOK means the command did what was asked.
	ExitOK = 0
	// ExitFailure means the command ran but failed: the broker refused,
	// a topic was missing, a record was not produced.
	ExitFailure = 1
	// ExitUsage means the command line was wrong: an unknown command or
	// flag, a bad flag value, a missing argument.
	ExitUsage = 2
	// ExitUpgradeRequired means stele serve stopped (or did not start)
	// because the chain upgrades, at the next height, to an app version
	// this binary cannot run: start the new binary on the same data
	// directory (docs/cluster.md, "Upgrades"). Supervisors should not
	// restart the same binary on it.
	ExitUpgradeRequired = 10
	// ExitRemoved means stele serve stopped (or did not start) because
	// the cluster took this broker out (stele cluster remove,
	// docs/cluster.md "Membership"). Supervisors should not restart it.
	ExitRemoved = 11
)

// Defaults of the global flags.
const (
	defaultBrokers = "127.0.0.1:9092"
	defaultTimeout = 30 * time.Second
	brokersEnv     = "STELE_BROKERS"
)

// Main runs the stele command line args against the process's standard
// streams and returns the exit code. The first SIGINT or SIGTERM cancels the
// command's context (consume then exits 0, produce stops reading and flushes);
// a second one kills the process the default way.
func Main(args ...string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// Restore the default handling after the first signal so that a
		// second one ends a process that is stuck; this goroutine ends
		// when ctx is done, which stop guarantees on return.
		<-ctx.Done()
		stop()
	}()
	return Run(ctx, args, os.Stdin, os.Stdout, os.Stderr)
}

// Run executes one stele command line in-process with the given streams and
// returns its exit code (ExitOK, ExitFailure, ExitUsage or
// ExitUpgradeRequired). Errors are
// written to stderr; ctx cancellation is how a caller interrupts a command.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root, g := build()
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if args == nil {
		args = []string{} // cobra reads os.Args when args is nil
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	return reportError(stderr, cmd, g, err)
}

// New builds the stele command tree. The caller sets its streams
// (SetIn/SetOut/SetErr) and arguments (SetArgs) and executes it; errors are
// returned, not printed (use Run for the printing and the exit code).
func New() *cobra.Command {
	root, _ := build()
	return root
}

// build returns the root command and the global options its flags fill.
func build() (*cobra.Command, *globalOptions) {
	g := newGlobalOptions()
	root := &cobra.Command{
		Use:   "stele",
		Short: "Stele: a Kafka-compatible event log ordered by CometBFT",
		Long: `Stele is a Kafka-compatible event log whose every change is ordered by CometBFT.

The admin commands are plain Kafka clients: they work against any
Kafka-compatible broker, Apache Kafka included. Point them at the brokers with
--brokers or the STELE_BROKERS environment variable.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noSubcommand,
		RunE:          showHelp,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	g.register(root)

	// Subcommands; new ones are added to this list. serve is in serve.go,
	// cluster (init, up) in cluster.go and cluster_up.go.
	root.AddCommand(
		newServeCmd(),
		newTopicCmd(g),
		newProduceCmd(g),
		newConsumeCmd(g),
		newConsumerGroupCmd(g),
		newShareGroupCmd(g),
		newConfigCmd(g),
		newDumpLogCmd(g),
		newKeyCmd(g),
		newSubjectCmd(g),
		newViewCmd(g),
		newSchemaCmd(g),
		newAsyncAPICmd(g),
		newVerifyCmd(g),
		newAuditCmd(g),
		newProducerKeyCmd(g),
		newUserCmd(g),
		newTenantCmd(g),
		newPluginCmd(g),
		newACLCmd(g),
		newQuotaCmd(g),
		newCertCmd(g),
		newClusterCmd(g),
		newBenchCmd(g),
		newVersionCmd(g),
	)
	return root, g
}

// newGroupCmd returns a command that only holds subcommands: run alone it
// prints its help; with an unknown subcommand it is a usage error.
func newGroupCmd(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  noSubcommand,
		RunE:  showHelp,
	}
	c.AddCommand(subs...)
	return c
}

// noSubcommand rejects any positional argument of a command that only holds
// subcommands: such an argument is a misspelt or unknown subcommand.
func noSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return usageError{errors.New(msg)}
}

func showHelp(cmd *cobra.Command, _ []string) error {
	return cmd.Help()
}

// usageError marks an error in the command line itself; Run exits with
// ExitUsage for it.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usageErrorf formats a usage error.
func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exactArgs accepts exactly the positional arguments named in names (such
// as "TOPIC"), with a usage error saying which is missing or extra.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(_ *cobra.Command, a []string) error {
		switch {
		case len(a) < len(names):
			return usageErrorf("missing %s argument", strings.Join(names[len(a):], " "))
		case len(a) > len(names):
			return usageErrorf("unexpected argument %q: want only %s", a[len(names)], strings.Join(names, " "))
		}
		return nil
	}
}

// minArgs accepts one or more positional arguments called name.
func minArgs(name string) cobra.PositionalArgs {
	return func(_ *cobra.Command, a []string) error {
		if len(a) == 0 {
			return usageErrorf("missing %s argument (one or more)", name)
		}
		return nil
	}
}

// noArgs accepts no positional argument.
func noArgs(_ *cobra.Command, a []string) error {
	if len(a) > 0 {
		return usageErrorf("unexpected argument %q: this command takes flags only", a[0])
	}
	return nil
}

// reportError prints err for a person and returns the exit code for it.
func reportError(stderr io.Writer, cmd *cobra.Command, g *globalOptions, err error) int {
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "stele: %v\n", err)
		path := "stele"
		if cmd != nil {
			path = cmd.CommandPath()
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", path)
		return ExitUsage
	}
	for _, l := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(stderr, "stele: %s\n", l)
	}
	if errors.Is(err, fsm.ErrUpgradeRequired) {
		return ExitUpgradeRequired
	}
	if errors.Is(err, server.ErrRemoved) {
		return ExitRemoved
	}
	if hint := g.connectionHint(err); hint != "" {
		fmt.Fprintln(stderr, hint)
	}
	var refused *signedRefusal
	if errors.Is(err, kerr.PolicyViolation) && !errors.As(err, &refused) && !strings.Contains(err.Error(), "must be signed") {
		fmt.Fprintln(stderr, "hint: under stele.admin.signed=true this change must be signed: add --sign KEY --principal NAME (docs/security.md#signed-administration)")
	}
	return ExitFailure
}
