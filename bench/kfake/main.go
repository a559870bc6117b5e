// Command kfake runs franz-go's kfake, an in-process fake Kafka cluster, on
// 127.0.0.1 so Kafka-protocol benchmarks (`stele bench`) can measure it
// beside Stele: it is the ceiling of the Kafka protocol and franz-go's
// client on this machine, with no replication, consensus or (by default)
// storage at all.
//
//	go run ./bench/kfake -port 9092
//
// It prints the bootstrap addresses (comma-separated, one line) on stdout
// once it listens, then runs until SIGINT or SIGTERM.
//
// By default the records are kept in memory only. -data-dir makes kfake
// write its log segments to a directory (page cache, fsynced on segment
// roll and shutdown, like Kafka's default), and -sync-writes adds an fsync
// per produced batch.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		os.Exit(1)
	}
}

func run() error {
	port := flag.Int("port", 0, "port of the first broker on 127.0.0.1 (0: any free port)")
	brokers := flag.Int("brokers", 1, "number of brokers; with -port they listen on consecutive ports")
	partitions := flag.Int("partitions", 8, "partitions of auto-created topics")
	dataDir := flag.String("data-dir", "", "directory to persist the log to (default: memory only)")
	syncWrites := flag.Bool("sync-writes", false, "fsync every produced batch (needs -data-dir)")
	flag.Parse()

	switch {
	case *brokers < 1:
		return fmt.Errorf("-brokers %d: want at least 1", *brokers)
	case *port < 0 || *port+*brokers-1 > 65535:
		return fmt.Errorf("-port %d: not a port", *port)
	case *syncWrites && *dataDir == "":
		return fmt.Errorf("-sync-writes needs -data-dir")
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(*brokers),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(*partitions),
	}
	if *port != 0 {
		ports := make([]int, *brokers)
		for i := range ports {
			ports[i] = *port + i
		}
		opts = append(opts, kfake.Ports(ports...))
	}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
		if *syncWrites {
			opts = append(opts, kfake.SyncWrites())
		}
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)

	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println(strings.Join(c.ListenAddrs(), ","))
	s := <-sigs
	fmt.Fprintf(os.Stderr, "kfake: %v: stopping\n", s)
	return nil
}
