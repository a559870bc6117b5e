package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/stele-io/stele/test/harness"
)

// TestByzantineAnswers: one broker of four lies to its clients (the
// stelebyzantine build's client lies, internal/kafka/lies.go): it alters,
// leaves out or reorders records in its Fetch answers, every batch with a
// valid CRC, and its Metadata names it the only broker, so clients
// bootstrapped from it send it everything. A Kafka client that does not
// verify believes it: the history checker finds what each lie does to
// what the consumers were handed (a forged value is a garbage read, a
// left-out batch a poll skip, two records swapped inconsistent offsets),
// while the logs the brokers store stay correct and identical (the lies
// are told, not applied). Plain Kafka clients cannot catch a lying broker;
// issue 9's verifying client must (docs/reliability.md, "Not done yet").
// This also shows the checker would see such a lie in a chaos run.
func TestByzantineAnswers(t *testing.T) {
	seed := runSeed(t)
	byz := harness.ByzantineBin(t)
	for _, c := range []struct{ lie, want string }{
		{"alter-records", GarbageRead},
		{"drop-batch", PollSkip},
		{"reorder-records", InconsistentOffsets},
	} {
		t.Run(c.lie, func(t *testing.T) {
			cl := harness.New(t, harness.Options{})
			liar := cl.Rng.IntN(len(cl.Nodes))
			cl.Nodes[liar].Bin, cl.Nodes[liar].Env = byz, []string{fmt.Sprintf("STELE_BYZANTINE=%s,lie-metadata", c.lie)}
			cl.StartAll()
			all := cl.KafkaAddrs(cl.All()...)
			harness.CreateTopic(t, all, sendTopic, sendParts, nil)
			harness.CreateTopic(t, all, txnTopic, txnParts, nil)

			// Every client is bootstrapped from the liar alone.
			rec := NewRecorder(seed, time.Now())
			w := startWorkload(cl.KafkaAddrs(liar), seed, rec)
			defer w.stopAll()
			time.Sleep(15 * time.Second)
			w.stopProduce()
			w.producers.Wait()
			waitNoOpenTransactions(t, all)
			// Every broker at one height: the first honest one holds all
			// that was acknowledged before it is read.
			cl.CheckAppHashes(time.Minute, cl.All()...)
			final := readFinal(t, cl, without(cl.All(), liar)[0])
			// A consumer told a lie may never be handed the last record.
			deadline := time.Now().Add(15 * time.Second)
			for w.caughtUp(final) != nil && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			w.stopAll()
			w.consumers.Wait()
			// The liar's own answers are lies: what it stores is compared
			// on disk below.
			for _, i := range without(cl.All(), liar) {
				if other := readFinal(t, cl, i); !sameFinal(final, other) {
					t.Errorf("node%d's committed log differs from the other honest brokers'", i)
				}
			}
			cl.CheckAppHashes(time.Minute, cl.All()...)
			cl.StopAll()
			files := cl.CompareLogs(cl.All()...) // the liar's files included

			report := Check(rec.History(), final)
			t.Logf("node%d told %s (and lie-metadata) to every client; %d log files byte-identical on 4 brokers\n%s",
				liar, c.lie, files, report.Summary())
			if report.Counts[c.want] == 0 {
				t.Errorf("the checker found no %s: the lie did not reach the clients, or the checker cannot see it", c.want)
			}
		})
	}
}

// without returns idx less drop.
func without(idx []int, drop int) []int {
	var out []int
	for _, i := range idx {
		if i != drop {
			out = append(out, i)
		}
	}
	return out
}
