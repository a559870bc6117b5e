package cli

import (
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stele-io/stele/internal/server"
)

// newServeCmd is `stele serve`: run one broker with everything embedded.
func newServeCmd() *cobra.Command {
	cfg := server.DefaultConfig()
	var logLevel, logFormat string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a Stele broker (a single node with everything embedded)",
		Long: `Run a Stele broker: the Kafka listener, the HTTP listener (/healthz,
/metrics) and an embedded CometBFT node that orders every change.

On first start the data directory is created with a fresh single-validator
chain (keys and genesis under DATA/cometbft). SIGTERM or SIGINT shut the
broker down cleanly; a kill -9 loses no acknowledged write: the state is
rebuilt from the committed blocks at the next start.`,
		Example: `  stele serve
  stele serve --data /var/lib/stele --kafka 0.0.0.0:9092 --advertise broker1:9092`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return usageError{err}
			}
			hopts := &slog.HandlerOptions{Level: level}
			var h slog.Handler = slog.NewTextHandler(cmd.ErrOrStderr(), hopts)
			if strings.EqualFold(logFormat, "json") {
				h = slog.NewJSONHandler(cmd.ErrOrStderr(), hopts)
			}
			cfg.Logger = slog.New(h)
			return server.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data", cfg.DataDir, "data directory")
	f.StringVar(&cfg.KafkaAddr, "kafka", cfg.KafkaAddr, "Kafka listener host:port")
	f.StringVar(&cfg.HTTPAddr, "http", cfg.HTTPAddr, "HTTP listener host:port (/healthz, /metrics)")
	f.StringVar(&cfg.AdvertisedKafka, "advertise", "", "host:port clients are told to connect to (default: the Kafka listener)")
	f.StringVar(&cfg.P2PAddr, "p2p", cfg.P2PAddr, "CometBFT peer-to-peer listener host:port")
	f.BoolVar(&cfg.AutoCreateTopics, "auto-create-topics", cfg.AutoCreateTopics, "auto.create.topics.enable: create unknown topics on Metadata and Produce")
	f.Int32Var(&cfg.DefaultPartitions, "num-partitions", cfg.DefaultPartitions, "num.partitions: partitions of auto-created topics")
	f.DurationVar(&cfg.TimeoutCommit, "timeout-commit", 0, "CometBFT pause after each block (default 0: the next block starts at once)")
	f.StringVar(&logLevel, "log-level", envOr("STELE_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env STELE_LOG_LEVEL)")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	return cmd
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
