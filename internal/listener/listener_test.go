package listener

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	ls, err := Parse("SASL_SSL://127.0.0.1:9093, PLAINTEXT://127.0.0.1:9092,ssl://:0,SASL_PLAINTEXT://[::1]:9095")
	if err != nil {
		t.Fatal(err)
	}
	want := []Listener{
		{"SASL_SSL", SASLSSL, "127.0.0.1", 9093},
		{"PLAINTEXT", Plaintext, "127.0.0.1", 9092},
		{"SSL", SSL, "", 0},
		{"SASL_PLAINTEXT", SASLPlaintext, "::1", 9095},
	}
	if len(ls) != len(want) {
		t.Fatalf("%+v", ls)
	}
	for i := range want {
		if ls[i] != want[i] {
			t.Errorf("listener %d: %+v, want %+v", i, ls[i], want[i])
		}
	}
	if ls[3].String() != "SASL_PLAINTEXT://[::1]:9095" || !ls[0].Protocol.TLS() || !ls[0].Protocol.SASL() || ls[1].Protocol.TLS() {
		t.Errorf("String or protocol: %s %v", ls[3], ls[0].Protocol)
	}
	for spec, why := range map[string]string{
		"":                                     "no listener",
		"127.0.0.1:9092":                       "NAME://host:port",
		"INTERNAL://127.0.0.1:9092":            "listener.security.protocol.map",
		"PLAINTEXT://127.0.0.1":                "missing port",
		"PLAINTEXT://127.0.0.1:99999":          "0 to 65535",
		"PLAINTEXT://h:1,PLAINTEXT://h:2":      "different name",
		"PLAINTEXT://h:9092,SSL://h:9092":      "different port",
		"PLAINTEXT://h:1,":                     "NAME://host:port",
		strings.Repeat("SSL://h:1,", 17) + "x": "at most 16",
	} {
		if _, err := Parse(spec); !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), why) {
			t.Errorf("Parse(%q): %v, want %q", spec, err, why)
		}
	}
}

// FuzzParse: a listener specification (a flag, a server.properties line)
// parses or fails with ErrSpec; what parses prints back to what parses the
// same.
func FuzzParse(f *testing.F) {
	f.Add("SASL_SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092")
	f.Add("SSL://[::1]:0")
	f.Add("PLAINTEXT://:9092")
	f.Fuzz(func(t *testing.T, spec string) {
		ls, err := Parse(spec)
		if err != nil {
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("Parse(%q): %v is not ErrSpec", spec, err)
			}
			return
		}
		var parts []string
		for _, l := range ls {
			parts = append(parts, l.String())
		}
		again, err := Parse(strings.Join(parts, ","))
		if err != nil || len(again) != len(ls) {
			t.Fatalf("Parse(%q) printed %v, which parses as %v (%v)", spec, parts, again, err)
		}
		for i := range ls {
			if again[i] != ls[i] {
				t.Fatalf("round trip of %q: %+v became %+v", spec, ls[i], again[i])
			}
		}
	})
}

// TestProtocolMapAndAdvertised: listener.security.protocol.map names
// listeners (case-insensitive, replacing the default map), and
// advertised.listeners gives some of them the address clients are told,
// with Kafka's refusals.
func TestProtocolMapAndAdvertised(t *testing.T) {
	pm, err := ParseProtocolMap("internal:PLAINTEXT, EXTERNAL:sasl_ssl")
	if err != nil {
		t.Fatal(err)
	}
	ls, err := ParseWithMap("INTERNAL://127.0.0.1:9092,external://0.0.0.0:9093", pm)
	if err != nil || len(ls) != 2 || ls[0].Protocol != Plaintext || ls[1].Name != "EXTERNAL" || ls[1].Protocol != SASLSSL {
		t.Fatalf("%+v %v", ls, err)
	}
	if _, err := ParseWithMap("SSL://127.0.0.1:9094", pm); err == nil {
		t.Error("a protocol name not in a given map was taken")
	}
	for _, bad := range []string{"INTERNAL", "A:TLS", "A:SSL,a:PLAINTEXT", "A B:SSL", ":SSL"} {
		if _, err := ParseProtocolMap(bad); err == nil {
			t.Errorf("map %q taken", bad)
		}
	}
	adv, err := ParseAdvertised("EXTERNAL://kafka.example.com:19093", ls)
	if err != nil || adv["EXTERNAL"] != "kafka.example.com:19093" || len(adv) != 1 {
		t.Fatalf("%v %v", adv, err)
	}
	for _, bad := range []string{"OTHER://h:1", "EXTERNAL://0.0.0.0:9093", "EXTERNAL://:9093", "EXTERNAL://h:0", "EXTERNAL://h:1,EXTERNAL://g:2", "EXTERNAL:h:1"} {
		if _, err := ParseAdvertised(bad, ls); err == nil {
			t.Errorf("advertised %q taken", bad)
		}
	}
}
