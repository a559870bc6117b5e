// Command encrypt is an example plugin (issue 24, pkg/plugin) with two
// hooks: its produce hook encrypts each record's value with AES-256-GCM
// before the record is stored, and its fetch hook decrypts the values for
// the consumers the config names. Deploy the one module twice, under two
// names, on the same topic with the same keys:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o encrypt.wasm ./examples/plugins/encrypt
//	stele plugin deploy encrypt --wasm encrypt.wasm --topic payments --config secret.key.1=$(head -c32 /dev/urandom | base64)
//	stele plugin deploy decrypt --wasm encrypt.wasm --topic payments --hook fetch --config secret.key.1=... --config readers=User:alice
//
// Config:
//
//	secret.key.ID=BASE64   a 32-byte key named ID (letters, digits, - and
//	                       _); several for a rotation. Config keys that
//	                       begin with "secret." are never shown by
//	                       stele plugin list/describe or /v1/plugins
//	key.current=ID         the key new values are encrypted with (needed
//	                       when there are several)
//	readers=P,P            fetch: the principals (User:alice) whose
//	                       fetches are decrypted; * for every principal.
//	                       Everyone else reads the values as stored
//
// A stored value is an envelope: "STE1", the key's ID (a byte of length,
// then the ID), a 12-byte nonce, and the AES-GCM ciphertext and tag of the
// value, with the topic and the record's key as associated data (an
// envelope copied to another topic or key does not decrypt). Null values
// (tombstones), keys and headers stay as they are. The nonce is not random
// (a produce hook must answer the same on every broker): it is the first
// 12 bytes of an HMAC-SHA-256, under a key derived from the encryption
// key, of the topic, the record's key and the value, as AES-GCM-SIV
// derives its nonces; so equal values under the same key, topic and
// record key give equal envelopes, which tells a reader of the log that
// they are equal and nothing else.
//
// A value the fetch hook cannot decrypt for a reader (a key ID the config
// no longer has, an envelope altered, a value stored before the plugin)
// is sent as stored, with the header stele-encrypt: undecryptable.
//
// What it protects: the values in the stored log, its segments, snapshots
// and backups, and from consumers not named in readers. What it does not:
// the brokers hold the keys in their replicated state (a broker's
// operator can read them), and the HTTP API's record reads and proofs
// show the stored envelopes.
package main

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/stele-io/stele/pkg/plugin"
)

func init() {
	plugin.HandleProduce(encryptBatch)
	plugin.HandleFetch(decryptBatch)
}

func main() {}

// magic opens an envelope.
const magic = "STE1"

const nonceSize = 12

// keyring is a config's keys, by ID, and the current one's ID.
type keyring struct {
	keys    map[string][]byte
	current string
}

func parseKeys(cfg map[string]string) (keyring, error) {
	kr := keyring{keys: map[string][]byte{}}
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		v := cfg[k]
		id, ok := strings.CutPrefix(k, "secret.key.")
		if !ok {
			continue
		}
		if id == "" || len(id) > 255 || strings.IndexFunc(id, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}) >= 0 {
			return kr, fmt.Errorf("encrypt: key ID %q: letters, digits, - and _ only", id)
		}
		key, err := base64.StdEncoding.DecodeString(v)
		if err != nil || len(key) != 32 {
			// The value is a secret: never in a message.
			return kr, fmt.Errorf("encrypt: secret.key.%s is not 32 bytes in base64", id)
		}
		kr.keys[id] = key
	}
	switch kr.current = cfg["key.current"]; {
	case len(kr.keys) == 0:
		return kr, errors.New("encrypt: the config has no key (secret.key.ID=BASE64 of 32 bytes)")
	case kr.current == "" && len(kr.keys) == 1:
		for id := range kr.keys {
			kr.current = id
		}
	case kr.current == "":
		return kr, errors.New("encrypt: several keys and no key.current=ID")
	case kr.keys[kr.current] == nil:
		return kr, fmt.Errorf("encrypt: key.current=%s names no secret.key.%s", kr.current, kr.current)
	}
	return kr, nil
}

// aad is what an envelope is bound to: the topic and the record's key.
func aad(topic string, key []byte) []byte {
	b := make([]byte, 0, 8+len(topic)+len(key))
	b = fmt.Appendf(b, "%d:%s", len(topic), topic)
	if key == nil {
		return append(b, 0)
	}
	return append(append(b, 1), key...)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func seal(key []byte, id, topic string, recKey, value []byte) ([]byte, error) {
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	ad := aad(topic, recKey)
	derive := hmac.New(sha256.New, key)
	derive.Write([]byte("stele encrypt example: nonce key"))
	mac := hmac.New(sha256.New, derive.Sum(nil))
	mac.Write(ad)
	mac.Write(value)
	nonce := mac.Sum(nil)[:nonceSize]
	out := make([]byte, 0, len(magic)+1+len(id)+nonceSize+len(value)+gcm.Overhead())
	out = append(append(append(out, magic...), byte(len(id))), id...)
	out = append(out, nonce...)
	return gcm.Seal(out, nonce, value, ad), nil
}

func open(kr keyring, topic string, recKey, env []byte) ([]byte, error) {
	rest, ok := bytes.CutPrefix(env, []byte(magic))
	if !ok || len(rest) < 1 || len(rest) < 1+int(rest[0])+nonceSize {
		return nil, errors.New("not an envelope")
	}
	id := string(rest[1 : 1+rest[0]])
	rest = rest[1+rest[0]:]
	key := kr.keys[id]
	if key == nil {
		return nil, fmt.Errorf("no key %s", id)
	}
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	return gcm.Open(nil, rest[:nonceSize], rest[nonceSize:], aad(topic, recKey))
}

func encryptBatch(b *plugin.Batch) ([]plugin.Record, error) {
	kr, err := parseKeys(b.Config)
	if err != nil {
		return nil, err
	}
	for i, r := range b.Records {
		if r.Value == nil {
			continue
		}
		if b.Records[i].Value, err = seal(kr.keys[kr.current], kr.current, b.Topic, r.Key, r.Value); err != nil {
			return nil, fmt.Errorf("encrypt: record %d: %v", i, err)
		}
	}
	return b.Records, nil
}

// HeaderUndecryptable marks a value sent as stored to a reader because it
// could not be decrypted.
const HeaderUndecryptable = "stele-encrypt"

func decryptBatch(b *plugin.FetchBatch) ([]plugin.FetchRecord, error) {
	readers := strings.Split(b.Config["readers"], ",")
	for i := range readers {
		readers[i] = strings.TrimSpace(readers[i])
	}
	if !slices.Contains(readers, "*") && !slices.Contains(readers, b.Principal) {
		return b.Records, nil // not a reader: the values as stored
	}
	kr, err := parseKeys(b.Config)
	if err != nil {
		return nil, err
	}
	for i, r := range b.Records {
		if r.Value == nil {
			continue
		}
		v, err := open(kr, b.Topic, r.Key, r.Value)
		if err != nil {
			b.Records[i].Headers = append(b.Records[i].Headers, plugin.Header{Key: HeaderUndecryptable, Value: []byte("undecryptable")})
			continue
		}
		b.Records[i].Value = v
	}
	return b.Records, nil
}
