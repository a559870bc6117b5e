package stele

import (
	"encoding/json"
	"testing"
)

// FuzzBytes: the API's byte strings (a broker's answer) decode or fail
// cleanly; a valid {"utf8"} or {"b64"} gives its bytes.
func FuzzBytes(f *testing.F) {
	for _, s := range []string{`{"utf8":"a\u0000b"}`, `{"b64":"/w=="}`, `{"b64":"!!"}`, `{}`, `null`, `[1]`, `{"utf8":1}`} {
		f.Add([]byte(s))
	}
	var b Bytes
	if err := json.Unmarshal([]byte(`{"b64":"/w=="}`), &b); err != nil || string(b) != "\xff" {
		f.Fatalf("b64: %q %v", b, err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Bytes
		_ = json.Unmarshal(data, &b)
	})
}
