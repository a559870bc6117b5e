package server

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const testPeer = "0123456789abcdef0123456789abcdef01234567@10.0.0.2:19293"

func TestNodeFileRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node1") // WriteNodeFile creates it
	want := NodeFile{
		NodeID: 1, Kafka: "0.0.0.0:19093", HTTP: "0.0.0.0:19193", P2P: "0.0.0.0:19293",
		AdvertiseKafka: "10.0.0.2:19093", P2PExternal: "10.0.0.2:19293", Peers: []string{testPeer},
	}
	if err := WriteNodeFile(dir, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := ReadNodeFile(dir)
	if err != nil || !ok {
		t.Fatalf("ReadNodeFile: %v, %v", ok, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
	// Only the file itself is left: the temporary file was renamed.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != NodeFileName {
		t.Fatalf("directory holds %v, want only %s", ents, NodeFileName)
	}
	data, _ := os.ReadFile(filepath.Join(dir, NodeFileName))
	for _, key := range []string{`"node_id": 1`, `"advertise_kafka"`, `"p2p_external"`, `"peers"`} {
		if !strings.Contains(string(data), key) {
			t.Errorf("file lacks %s:\n%s", key, data)
		}
	}
}

func TestReadNodeFileAbsent(t *testing.T) {
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "missing")} {
		f, ok, err := ReadNodeFile(dir)
		if ok || err != nil || !reflect.DeepEqual(f, NodeFile{}) {
			t.Errorf("ReadNodeFile(%s) = %+v, %v, %v; want zero, false, nil", dir, f, ok, err)
		}
	}
}

func TestParseNodeFileRejects(t *testing.T) {
	for name, text := range map[string]string{
		"not json":        `kafka = 1`,
		"unknown key":     `{"kafak": "127.0.0.1:1"}`,
		"trailing data":   `{"node_id": 1} {"node_id": 2}`,
		"negative id":     `{"node_id": -1}`,
		"id too large":    `{"node_id": 3000000000}`,
		"bad address":     `{"kafka": "127.0.0.1"}`,
		"no port":         `{"http": "127.0.0.1:"}`,
		"bad peer":        `{"peers": ["127.0.0.1:19292"]}`,
		"peer without id": `{"peers": ["@127.0.0.1:19292"]}`,
		"wrong type":      `{"peers": "a@b:1"}`,
		"bad listeners":   `{"listeners": "HTTP://127.0.0.1:1"}`,
		"bad client auth": `{"ssl_client_auth": "always"}`,
	} {
		if _, err := ParseNodeFile([]byte(text)); !errors.Is(err, ErrNodeFile) {
			t.Errorf("%s: ParseNodeFile(%s) = %v, want ErrNodeFile", name, text, err)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, NodeFileName), []byte(`{"kafka": 9092}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadNodeFile(dir); !errors.Is(err, ErrNodeFile) || !strings.Contains(err.Error(), NodeFileName) {
		t.Errorf("ReadNodeFile of a bad file: %v, want ErrNodeFile naming the file", err)
	}
	if err := WriteNodeFile(dir, NodeFile{Kafka: "nope"}); !errors.Is(err, ErrNodeFile) {
		t.Errorf("WriteNodeFile of an invalid file: %v", err)
	}
}

func TestApplyNodeFile(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ApplyNodeFile(NodeFile{NodeID: 3, Kafka: "127.0.0.1:19095", Peers: []string{testPeer}})
	want := DefaultConfig()
	want.NodeID, want.KafkaAddr, want.Peers = 3, "127.0.0.1:19095", []string{testPeer}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got %+v\nwant %+v", cfg, want)
	}
	// The TLS files of `cluster init --tls`, relative to the data
	// directory; absolute ones as they are.
	cfg = DefaultConfig()
	cfg.DataDir = "/srv/node2"
	cfg.ApplyNodeFile(NodeFile{Listeners: "SSL://127.0.0.1:19094", SSLCert: "tls/broker.crt", SSLKey: "/keys/broker.key",
		SSLCA: "tls/ca.crt", SSLClientAuth: "required"})
	if cfg.Listeners != "SSL://127.0.0.1:19094" || cfg.TLS.Cert != "/srv/node2/tls/broker.crt" || cfg.TLS.Key != "/keys/broker.key" ||
		cfg.TLS.CA != "/srv/node2/tls/ca.crt" || cfg.TLS.ClientAuth != "required" {
		t.Fatalf("TLS from the node file: %+v %q", cfg.TLS, cfg.Listeners)
	}
	// An empty file changes nothing but the node id.
	cfg = DefaultConfig()
	cfg.NodeID = 9
	cfg.ApplyNodeFile(NodeFile{})
	if !reflect.DeepEqual(cfg, DefaultConfig()) {
		t.Fatalf("empty node file changed the config: %+v", cfg)
	}
}

func FuzzParseNodeFile(f *testing.F) {
	f.Add([]byte(`{"node_id":1,"kafka":"0.0.0.0:19093","http":"0.0.0.0:19193","p2p":"0.0.0.0:19293","advertise_kafka":"h:19093","p2p_external":"h:19293","peers":["` + testPeer + `"]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"node_id":-1}`))
	f.Add([]byte(`{"peers":[null]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		nf, err := ParseNodeFile(data)
		if err != nil {
			if !errors.Is(err, ErrNodeFile) {
				t.Fatalf("error %v does not wrap ErrNodeFile", err)
			}
			return
		}
		if err := nf.Validate(); err != nil {
			t.Fatalf("parsed file does not validate: %v", err)
		}
		// What parses survives a write and a read.
		dir := t.TempDir()
		if err := WriteNodeFile(dir, nf); err != nil {
			t.Fatal(err)
		}
		back, ok, err := ReadNodeFile(dir)
		if err != nil || !ok {
			t.Fatalf("read back: %v %v", ok, err)
		}
		if len(back.Peers) == 0 && len(nf.Peers) == 0 {
			back.Peers, nf.Peers = nil, nil
		}
		if !reflect.DeepEqual(back, nf) {
			t.Fatalf("round trip: %+v became %+v", nf, back)
		}
	})
}
