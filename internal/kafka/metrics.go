package kafka

import (
	"reflect"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type metrics struct {
	requests           *prometheus.CounterVec   // api, error
	latency            *prometheus.HistogramVec // api
	rejected           *prometheus.CounterVec   // reason
	produceBytes       prometheus.Counter
	fetchBytes         prometheus.Counter
	barriers           *prometheus.CounterVec // result
	acceptErrors       *prometheus.CounterVec // reason
	writeTimeouts      prometheus.Counter
	connections        prometheus.Gauge
	refused            *prometheus.CounterVec // reason
	acceptBlocked      *prometheus.CounterVec // reason
	throttled          prometheus.Counter
	authSuccesses      prometheus.Counter
	authFailures       prometheus.Counter
	throttledResponses prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "requests_total",
			Help: "Kafka requests answered, by API and by the error codes in the response (NONE when there were none).",
		}, []string{"api", "error"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "request_duration_seconds",
			Help:    "Time from reading a Kafka request to having its response ready.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"api"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "connections_closed_on_bad_input_total",
			Help: "Connections closed because of a request Kafka would also refuse to answer, by reason.",
		}, []string{"reason"}),
		produceBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "produce_bytes_total",
			Help: "Record batch bytes accepted by Produce.",
		}),
		fetchBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "fetch_bytes_total",
			Help: "Record batch bytes returned by Fetch.",
		}),
		barriers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "read_barriers_total",
			Help: "Reads that first waited for a block ordered after them, to be sure this broker is not behind, by result (ok, or failed: answered NOT_LEADER_OR_FOLLOWER).",
		}, []string{"result"}),
		acceptErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "accept_errors_total",
			Help: "Failed accepts on the Kafka listener, each retried after a pause, by reason: the accept(2) error's name (emfile: out of file descriptors), timeout or temporary.",
		}, []string{"reason"}),
		writeTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "write_timeouts_total",
			Help: "Connections closed because their client took no byte of a response for the write timeout (it stopped reading).",
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "connections",
			Help: "Kafka connections open now (what max.connections counts).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "connections_refused_total",
			Help: "Kafka connections closed without being served, by reason (max_connections_per_ip: their address already had max.connections.per.ip or its override; connection_creation_rate: their address connected faster than its ip quota, held for the throttle first).",
		}, []string{"reason"}),
		acceptBlocked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "accept_blocked_seconds_total",
			Help: "Time the Kafka listener accepted nothing, by reason: max_connections (max.connections were open; Kafka's AcceptorBlockedPercent), connection_rate (a connection was held for max.connection.creation.rate) or file_descriptors (one more would have left the process fewer than its reserve).",
		}, []string{"reason"}),
		throttled: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "connections_throttled_total",
			Help: "Kafka connections held before they were served because they took the connection creation rate above max.connection.creation.rate (the time is in accept_blocked_seconds_total{reason=\"connection_rate\"}).",
		}),
		authSuccesses: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "sasl_authentications_total",
			Help: "SASL authentications (and re-authentications) that succeeded (Kafka's successful-authentication-total).",
		}),
		throttledResponses: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "quota_throttled_responses_total",
			Help: "Produce and Fetch responses throttled by a client quota (producer_byte_rate, consumer_byte_rate): their connection muted for the throttle_time_ms they carry.",
		}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "stele", Subsystem: "kafka", Name: "sasl_authentication_failures_total",
			Help: "SASL authentications that failed, each answered SASL_AUTHENTICATION_FAILED and its connection closed (Kafka's failed-authentication-total).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.rejected, m.produceBytes, m.fetchBytes, m.barriers, m.acceptErrors,
			m.writeTimeouts, m.connections, m.refused, m.acceptBlocked, m.throttled, m.authSuccesses, m.authFailures, m.throttledResponses)
	}
	return m
}

// observe counts an answered request under each distinct error code found
// anywhere in its response.
func (m *metrics) observe(key int16, resp kmsg.Response, took time.Duration) {
	api := kmsg.NameForKey(key)
	m.latency.WithLabelValues(api).Observe(took.Seconds())
	codes := map[int16]bool{}
	collectErrorCodes(reflect.ValueOf(resp), codes)
	if len(codes) == 0 {
		m.requests.WithLabelValues(api, "NONE").Inc()
		return
	}
	for code := range codes {
		name := strconv.Itoa(int(code))
		if err := kerr.ErrorForCode(code); err != nil {
			if ke, ok := err.(*kerr.Error); ok {
				name = ke.Message
			}
		}
		m.requests.WithLabelValues(api, name).Inc()
	}
}

var int16Type = reflect.TypeOf(int16(0))

// collectErrorCodes walks a kmsg response for non-zero ErrorCode fields.
// It skips byte slices (record batches) so large fetches cost little.
func collectErrorCodes(v reflect.Value, codes map[int16]bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			collectErrorCodes(v.Elem(), codes)
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < v.NumField(); i++ {
			f := t.Field(i)
			if f.Name == "ErrorCode" && f.Type == int16Type {
				if c := int16(v.Field(i).Int()); c != 0 {
					codes[c] = true
				}
				continue
			}
			if f.IsExported() {
				collectErrorCodes(v.Field(i), codes)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		for i := 0; i < v.Len(); i++ {
			collectErrorCodes(v.Index(i), codes)
		}
	}
}
