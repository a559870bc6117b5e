package cli

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestRecordFormat(t *testing.T) {
	rec := &kgo.Record{
		Topic: "orders", Partition: 3, Offset: 42, Timestamp: time.UnixMilli(1700000000123),
		Key: []byte("k"), Value: []byte("value"),
		Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "b", Value: nil}},
	}
	null := &kgo.Record{Topic: "t"}
	for _, tc := range []struct {
		format string
		rec    *kgo.Record
		want   string
	}{
		{defaultFormat, rec, "value\n"},
		{`%T %p %o %t %k %v %h %K %V`, rec, "orders 3 42 1700000000123 k value a=1,b= 1 5"},
		{`100%% \\ \t\r\n`, rec, "100% \\ \t\r\n"},
		{`[%k][%v][%h] %K %V`, null, "[][][] -1 -1"},
		{"", rec, ""},
		{"plain", rec, "plain"},
	} {
		f, err := parseFormat(tc.format)
		if err != nil {
			t.Errorf("parseFormat(%q): %v", tc.format, err)
			continue
		}
		if got := string(f.append(nil, tc.rec)); got != tc.want {
			t.Errorf("format %q = %q, want %q", tc.format, got, tc.want)
		}
	}
}

func TestRecordFormatErrors(t *testing.T) {
	for _, s := range []string{`%`, `abc%`, `%x`, `\`, `\q`, `%v\`} {
		_, err := parseFormat(s)
		if !errors.Is(err, errBadFormat) {
			t.Errorf("parseFormat(%q) = %v, want errBadFormat", s, err)
		}
	}
}

func FuzzParseFormat(f *testing.F) {
	for _, s := range []string{defaultFormat, `%k=%v %h\t%o`, `%%\\`, `%`, `\x`, `%K%V%T%t%p`} {
		f.Add(s)
	}
	rec := &kgo.Record{Topic: "t", Key: []byte("k"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("1")}}}
	f.Fuzz(func(t *testing.T, s string) {
		parsed, err := parseFormat(s)
		if err != nil {
			if !errors.Is(err, errBadFormat) {
				t.Fatalf("parseFormat(%q): error %v does not wrap errBadFormat", s, err)
			}
			return
		}
		// A template without verbs or escapes formats to itself.
		out := parsed.append(nil, rec)
		plain := true
		for i := 0; i < len(s); i++ {
			plain = plain && s[i] != '%' && s[i] != '\\'
		}
		if plain && string(out) != s {
			t.Fatalf("plain template %q formatted as %q", s, out)
		}
	})
}
