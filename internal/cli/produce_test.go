package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Records the broker refuses make produce exit 1 after the summary, with the
// first error by its Kafka name.
func TestProduceRecordFailure(t *testing.T) {
	c := newTestCluster(t, "orders")
	c.kc.ControlKey(kmsg.Produce.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.kc.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.MessageTooLarge.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	r := c.run("a\nb\n", "produce", "orders", "--linger", "0s", "--output", "json")
	wantFailure(t, r, ExitFailure, "Produced 0 records", "2 failed", "2 records were not produced",
		"MESSAGE_TOO_LARGE")
	var sum produceSummary
	decodeJSON(t, r.stdout, &sum)
	if sum.Records != 0 || sum.Failed != 2 || !strings.Contains(sum.FirstError, "MESSAGE_TOO_LARGE") {
		t.Errorf("summary = %+v", sum)
	}
}

// An interrupt while waiting for input ends produce cleanly after the
// records already read are produced.
func TestProduceInterrupt(t *testing.T) {
	c := newTestCluster(t, "orders")
	pr, pw := io.Pipe()
	defer pw.Close() // ends the line reader, which still waits on the pipe
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		args := []string{"--brokers", c.brokers, "produce", "orders"}
		done <- Run(ctx, args, pr, io.Discard, &stderr)
	}()
	if _, err := pw.Write([]byte("first\n")); err != nil { // returns once the line is being read
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		r := c.run("", "consume", "orders", "--from-beginning", "--max-messages", "1", "--timeout-idle", "2s")
		if r.stdout != "first\n" {
			return io.ErrUnexpectedEOF
		}
		return nil
	})
	cancel()
	select {
	case code := <-done:
		if code != ExitOK || !strings.Contains(stderr.String(), "Produced 1 record ") {
			t.Errorf("interrupted produce: exit %d, stderr %q", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("produce did not stop after its context was cancelled")
	}
}

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	p := startProgress(&buf, 2048)
	p.addRead(2048)
	p.addRecord()
	p.stop()
	out := buf.String()
	for _, want := range []string{"100%", "2.0 KiB / 2.0 KiB", "1 records", "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("progress output %q lacks %q", out, want)
		}
	}
	if isTerminal(&buf) {
		t.Error("a buffer is not a terminal")
	}
	var nilProgress *progress // a nil progress does nothing
	nilProgress.addRead(1)
	nilProgress.addRecord()
	nilProgress.stop()
}

// As with kafka-console-producer.sh, a broker that creates topics on demand
// (auto.create.topics.enable) gets the topic created by produce.
func TestProduceAutoCreatesTopic(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(2))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	c := &testCluster{t: t, kc: kc, brokers: strings.Join(kc.ListenAddrs(), ",")}
	c.ok("hello\n", "produce", "fresh", "--partition", "1")
	r := c.ok("", "consume", "fresh", "--partition", "1", "--offset", "earliest", "--max-messages", "1")
	if r.stdout != "hello\n" {
		t.Errorf("consumed %q", r.stdout)
	}
}
