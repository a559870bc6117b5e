package broker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stele-io/stele/internal/fsm"
)

type metrics struct {
	txs           prometheus.Counter
	txBytes       prometheus.Counter
	commitLatency prometheus.Histogram
	height        prometheus.Gauge
	evidence      *prometheus.CounterVec
	localFaults   *prometheus.CounterVec
	deferred      prometheus.Counter
	held          prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, f *fsm.FSM) *metrics {
	m := &metrics{
		txs: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "stele", Name: "transactions_submitted_total",
			Help: "Transactions this broker handed to the orderer.",
		}),
		txBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "stele", Name: "transaction_bytes_submitted_total",
			Help: "Bytes of transactions this broker handed to the orderer.",
		}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "stele", Name: "commit_latency_seconds",
			Help:    "Time from submitting a transaction to its block being committed and applied.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		height: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "stele", Name: "block_height",
			Help: "Height of the last committed block.",
		}),
		evidence: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "stele", Name: "evidence_committed_total",
			Help: "Evidence of validator misbehavior (duplicate votes, light-client attacks) in committed blocks.",
		}, []string{"kind"}),
		localFaults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "stele", Name: "local_faults_total",
			Help: "Local disk or store faults while applying (stage=apply) or committing (stage=commit) a block; each stops the broker (fail-stop).",
		}, []string{"stage"}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "stele", Name: "proposal_deferred_transactions_total",
			Help: "Transactions this broker's proposals left in the mempool for a later block to share the block among tenants (--tenant-block-share).",
		}),
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "stele", Name: "transactions_held_total",
			Help: "Transactions of a tenant this broker held back while it had its fill in ordering and other tenants produced (--tenant-block-share).",
		}),
	}
	h, _ := f.Info()
	m.height.Set(float64(h))
	if reg != nil {
		reg.MustRegister(m.txs, m.txBytes, m.commitLatency, m.height, m.evidence, m.localFaults, m.deferred, m.held)
	}
	return m
}
