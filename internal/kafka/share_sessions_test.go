package kafka

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestShareSessionLimit: a broker keeps at most its limit of share
// sessions (Kafka's group.share.max.share.sessions); a new one past it is
// SHARE_SESSION_LIMIT_REACHED, a member's session opened again is not a
// new one, and the sessions of closed connections make room.
func TestShareSessionLimit(t *testing.T) {
	s := &shareSessions{limit: 2}
	live := &conn{ctx: context.Background()}
	ctx, cancel := context.WithCancel(context.Background())
	closing := &conn{ctx: ctx}
	k := func(m string) shareSessionKey { return shareSessionKey{group: "g", member: m} }
	if _, code := s.open(live, k("a")); code != 0 {
		t.Fatalf("first: %v", kerr.ErrorForCode(code))
	}
	if _, code := s.open(closing, k("b")); code != 0 {
		t.Fatalf("second: %v", kerr.ErrorForCode(code))
	}
	if _, code := s.open(live, k("c")); code != kerr.ShareSessionLimitReached.Code {
		t.Fatalf("third: %v, want SHARE_SESSION_LIMIT_REACHED", kerr.ErrorForCode(code))
	}
	if _, code := s.open(live, k("a")); code != 0 {
		t.Fatalf("a's session opened again: %v", kerr.ErrorForCode(code))
	}
	cancel() // b's connection closes
	if _, code := s.open(live, k("c")); code != 0 {
		t.Fatalf("third after b's connection closed: %v", kerr.ErrorForCode(code))
	}
	if _, code := s.at(k("b"), 1); code != kerr.ShareSessionNotFound.Code {
		t.Fatalf("b's session after its connection closed: %v", kerr.ErrorForCode(code))
	}
}
