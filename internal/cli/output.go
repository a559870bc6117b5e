package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kerr"
)

// writeJSON writes v as indented JSON followed by a newline. The structs
// passed here are the stable JSON form of each command's output: fields are
// only ever added, never renamed or removed.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable returns a tabwriter for aligned columns; callers Flush it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// topicNotFoundError says a topic does not exist. It matches
// kerr.UnknownTopicOrPartition with errors.Is.
type topicNotFoundError struct{ topic string }

func (e topicNotFoundError) Error() string {
	return fmt.Sprintf("topic %q does not exist (see 'stele topic list'; create it with 'stele topic create %s')",
		e.topic, e.topic)
}

// Is makes errors.Is(err, kerr.UnknownTopicOrPartition) true.
func (e topicNotFoundError) Is(target error) bool { return target == kerr.UnknownTopicOrPartition }

// brokerError describes a failed operation on a resource, with the Kafka
// error code by name (kerr prints "NAME: description") and the broker's own
// message when it adds something.
func brokerError(what string, err error, brokerMsg string) error {
	if brokerMsg != "" && !strings.Contains(err.Error(), brokerMsg) {
		return fmt.Errorf("%s: %w (broker says: %s)", what, err, brokerMsg)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// isUnknownTopic reports whether err is Kafka's UNKNOWN_TOPIC_OR_PARTITION
// or UNKNOWN_TOPIC_ID.
func isUnknownTopic(err error) bool {
	return errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID)
}

// parseKeyValue splits "k=v" at the first '='; the value may be empty and may
// contain '='. flag names the flag for the error message.
func parseKeyValue(s, flag string) (string, string, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return "", "", usageErrorf("invalid %s %q: want key=value", flag, s)
	}
	return k, v, nil
}

// parseConfigs parses repeated k=v flag values into a map; a key given
// twice is a usage error.
func parseConfigs(list []string, flag string) (map[string]*string, error) {
	m := make(map[string]*string, len(list))
	for _, s := range list {
		k, v, err := parseKeyValue(s, flag)
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, usageErrorf("%s %q is given twice", flag, k)
		}
		m[k] = &v
	}
	return m, nil
}

// joinInt32s formats ids as "1,2,3" ("-" when empty).
func joinInt32s(ids []int32) string {
	if len(ids) == 0 {
		return "-"
	}
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(id)))
	}
	return b.String()
}

// orEmpty returns ids, or an empty non-nil slice so JSON shows [] not null.
func orEmpty(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}

// formatOffset formats a listed offset; -1 (unknown) shows as "-".
func formatOffset(o int64) string {
	if o < 0 {
		return "-"
	}
	return strconv.FormatInt(o, 10)
}
