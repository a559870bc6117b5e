package main

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stele-io/stele/pkg/plugin"
)

// TestEncrypt: values are sealed into envelopes that say their key; the
// same value, topic and record key give the same envelope (the nonce is
// derived, not random), another key or topic another; readers get the
// values back, others the envelopes; a rotated key still decrypts what it
// sealed; an envelope altered or of a key removed is sent as stored with
// the undecryptable header; tombstones pass; bad configs are refused
// without the secret in the message.
func TestEncrypt(t *testing.T) {
	k1 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	k2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
	cfg := map[string]string{"secret.key.a": k1}
	produce := func(cfg map[string]string, topic string, recs ...plugin.Record) []plugin.Record {
		t.Helper()
		out, err := encryptBatch(&plugin.Batch{Topic: topic, Config: cfg, Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	rec := func(k, v string) plugin.Record {
		r := plugin.Record{Key: []byte(k), Value: []byte(v)}
		if v == "<null>" {
			r.Value = nil
		}
		return r
	}
	sealed := produce(cfg, "pay", rec("k", "secret value"), rec("k", "secret value"), rec("j", "secret value"), rec("k", "<null>"))
	if !bytes.HasPrefix(sealed[0].Value, []byte("STE1\x01a")) || bytes.Contains(sealed[0].Value, []byte("secret value")) {
		t.Fatalf("an envelope: %q", sealed[0].Value)
	}
	if !bytes.Equal(sealed[0].Value, sealed[1].Value) || bytes.Equal(sealed[0].Value, sealed[2].Value) || sealed[3].Value != nil {
		t.Fatalf("same value and key, same envelope; another key, another; a tombstone kept: %+v", sealed)
	}
	if other := produce(cfg, "pay2", rec("k", "secret value")); bytes.Equal(other[0].Value, sealed[0].Value) {
		t.Fatal("another topic, the same envelope")
	}

	fetch := func(cfg map[string]string, principal, topic string, recs []plugin.Record) []plugin.FetchRecord {
		t.Helper()
		in := &plugin.FetchBatch{Topic: topic, Principal: principal, Config: cfg}
		for i, r := range recs {
			in.Records = append(in.Records, plugin.FetchRecord{Offset: int64(i), Record: r})
		}
		out, err := decryptBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	rcfg := map[string]string{"secret.key.a": k1, "readers": "User:alice, User:bob"}
	got := fetch(rcfg, "User:alice", "pay", sealed)
	if string(got[0].Value) != "secret value" || string(got[2].Value) != "secret value" || got[3].Value != nil || len(got[0].Headers) != 0 {
		t.Fatalf("alice reads: %+v", got)
	}
	if got := fetch(rcfg, "User:eve", "pay", sealed); !bytes.Equal(got[0].Value, sealed[0].Value) {
		t.Fatalf("eve reads: %q", got[0].Value)
	}
	if got := fetch(map[string]string{"secret.key.a": k1, "readers": "*"}, "User:ANONYMOUS", "pay", sealed); string(got[0].Value) != "secret value" {
		t.Fatalf("readers=*: %q", got[0].Value)
	}

	// Rotation: b is current, a still decrypts what it sealed.
	rotated := map[string]string{"secret.key.a": k1, "secret.key.b": k2, "key.current": "b", "readers": "*"}
	newer := produce(rotated, "pay", rec("k", "later"))
	if !bytes.HasPrefix(newer[0].Value, []byte("STE1\x01b")) {
		t.Fatalf("sealed with b: %q", newer[0].Value)
	}
	both := append(append([]plugin.Record{}, sealed[0]), newer[0])
	if got := fetch(rotated, "User:x", "pay", both); string(got[0].Value) != "secret value" || string(got[1].Value) != "later" {
		t.Fatalf("after rotation: %+v", got)
	}
	// a removed, an envelope altered, a value stored before the plugin.
	altered := bytes.Clone(sealed[0].Value)
	altered[len(altered)-1] ^= 1
	onlyB := map[string]string{"secret.key.b": k2, "readers": "*"}
	got = fetch(onlyB, "User:x", "pay", []plugin.Record{sealed[0], {Key: []byte("k"), Value: altered}, rec("k", "plain"), newer[0]})
	for i := range 3 {
		if len(got[i].Headers) != 1 || got[i].Headers[0].Key != HeaderUndecryptable {
			t.Fatalf("record %d undecryptable: %+v", i, got[i])
		}
	}
	if string(got[3].Value) != "later" || string(got[2].Value) != "plain" {
		t.Fatalf("decryptable ones: %+v", got)
	}
	// Moved to another topic: does not decrypt.
	if got := fetch(rcfg, "User:alice", "elsewhere", sealed[:1]); len(got[0].Headers) != 1 {
		t.Fatalf("an envelope read on another topic: %+v", got[0])
	}

	for name, c := range map[string]map[string]string{
		"no key":          {},
		"short key":       {"secret.key.a": base64.StdEncoding.EncodeToString([]byte("short"))},
		"not base64":      {"secret.key.a": "%%%"},
		"bad id":          {"secret.key.a/b": k1},
		"two, no current": {"secret.key.a": k1, "secret.key.b": k2},
		"current unknown": {"secret.key.a": k1, "key.current": "z"},
	} {
		_, err := encryptBatch(&plugin.Batch{Topic: "pay", Config: c, Records: []plugin.Record{rec("k", "v")}})
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		for _, v := range c {
			if len(v) > 3 && strings.Contains(err.Error(), v) {
				t.Errorf("%s: the message %q holds a secret", name, err)
			}
		}
	}
}
