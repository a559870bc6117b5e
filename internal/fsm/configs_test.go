package fsm

import (
	"sort"
	"testing"

	"github.com/stele-io/stele/internal/fsm/topics"
)

// TestTopicConfigDefsSorted: LookupConfig searches topicConfigs by name.
func TestTopicConfigDefsSorted(t *testing.T) {
	if !sort.SliceIsSorted(topics.TopicConfigs, func(i, j int) bool { return topics.TopicConfigs[i].Name < topics.TopicConfigs[j].Name }) {
		t.Fatal("topicConfigs is not sorted by name")
	}
	for _, d := range topics.TopicConfigs {
		if _, ok := topics.LookupConfig(d.Name); !ok {
			t.Errorf("LookupConfig(%q) finds nothing", d.Name)
		}
		if err := topics.ValidateConfig(d.Name, d.Default); err != nil && d.Default != "" {
			t.Errorf("%s: its default %q is refused: %v", d.Name, d.Default, err)
		}
	}
}

// TestMessageFormatVersion: the versions Kafka's MetadataVersion parses.
func TestMessageFormatVersion(t *testing.T) {
	for _, v := range []string{"0.8.0", "0.10.0-IV1", "0.10.2.1", "0.11.0", "1.0", "2.8-IV1", "2.8.2", "3.0-IV1", "3.9", "3.9.0", "3.7-IV4"} {
		if err := topics.MessageFormatVersion(v); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
	for _, v := range []string{"", "0.7.0", "3", "3.10", "2.8-IV2", "4.1", "x"} {
		if err := topics.MessageFormatVersion(v); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
}
