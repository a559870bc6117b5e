package cometbft

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/cometbft/cometbft/consensus"
	cstypes "github.com/cometbft/cometbft/consensus/types"
	"github.com/cometbft/cometbft/crypto"
	"github.com/cometbft/cometbft/crypto/ed25519"
	cmtpubsub "github.com/cometbft/cometbft/libs/pubsub"
	"github.com/cometbft/cometbft/p2p"
	"github.com/cometbft/cometbft/p2p/mock"
	cmtcons "github.com/cometbft/cometbft/proto/tendermint/consensus"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	"github.com/cometbft/cometbft/types"
)

// recordingPeer is a mock peer that keeps what is sent to it and whose
// connection can be full.
type recordingPeer struct {
	*mock.Peer
	full bool
	sent []p2p.Envelope
}

func (p *recordingPeer) TrySend(e p2p.Envelope) bool {
	if p.full {
		return false
	}
	p.sent = append(p.sent, e)
	return true
}

// peerAt returns a peer the consensus reactor believes is at height h,
// round 0, prevote step, among 4 validators; h 0 gives one without a
// PeerState (not yet set up by the reactor).
func peerAt(h int64, full bool) *recordingPeer {
	p := &recordingPeer{Peer: mock.NewPeer(net.IP{127, 0, 0, 1}), full: full}
	if h > 0 {
		ps := consensus.NewPeerState(p)
		ps.ApplyNewRoundStepMessage(&consensus.NewRoundStepMessage{Height: h, Round: 0, Step: cstypes.RoundStepPrevote})
		ps.EnsureVoteBitArrays(h, 4)
		p.Set(types.PeerStateKey, ps)
	}
	return p
}

func pushTestVote(addr crypto.Address, h int64, index int32) *types.Vote {
	return &types.Vote{
		Type: cmtproto.PrevoteType, Height: h, Round: 0, ValidatorAddress: addr, ValidatorIndex: index,
		Timestamp: time.Unix(1, 0).UTC(), Signature: []byte("signature"),
	}
}

func sameVote(got *cmtproto.Vote, want *types.Vote) bool {
	a, err1 := got.Marshal()
	b, err2 := want.ToProto().Marshal()
	return err1 == nil && err2 == nil && bytes.Equal(a, b)
}

func hasPrevote(p *recordingPeer, index int) bool {
	prevotes := p.Get(types.PeerStateKey).(*consensus.PeerState).GetRoundState().Prevotes
	return prevotes != nil && prevotes.GetIndex(index)
}

// A pushed vote goes to every set-up peer with room on its connection, as
// a vote message on the vote channel, and is marked known only where the
// reactor places the peer at the vote's height: a peer that was behind
// still gets it from gossip once it catches up.
func TestPushVote(t *testing.T) {
	addr := ed25519.GenPrivKey().PubKey().Address()
	vote := pushTestVote(addr, 7, 2)
	same, behind, full, unset := peerAt(7, false), peerAt(6, false), peerAt(7, true), peerAt(0, false)
	pushVote([]p2p.Peer{same, behind, full, unset}, vote)

	for name, p := range map[string]*recordingPeer{"same height": same, "behind": behind} {
		if len(p.sent) != 1 {
			t.Fatalf("%s: %d messages sent, want 1", name, len(p.sent))
		}
		e := p.sent[0]
		msg, ok := e.Message.(*cmtcons.Vote)
		if e.ChannelID != consensus.VoteChannel || !ok || !sameVote(msg.Vote, vote) {
			t.Fatalf("%s: sent %#x %v, want the vote on the vote channel", name, e.ChannelID, e.Message)
		}
	}
	if !hasPrevote(same, 2) {
		t.Error("the peer at the vote's height is not marked as having it: gossip would send it again")
	}
	if hasPrevote(behind, 2) || hasPrevote(full, 2) {
		t.Error("a peer behind, or one whose connection was full, is marked as having the vote: gossip would never send it")
	}
	if len(full.sent) != 0 || len(unset.sent) != 0 {
		t.Errorf("sent to a full connection (%d) or to a peer the reactor has not set up (%d)", len(full.sent), len(unset.sent))
	}
}

type fakeSubscription struct {
	out      chan cmtpubsub.Message
	canceled chan struct{}
	err      error
}

func (s *fakeSubscription) Out() <-chan cmtpubsub.Message { return s.out }
func (s *fakeSubscription) Canceled() <-chan struct{}     { return s.canceled }
func (s *fakeSubscription) Err() error                    { return s.err }

// pushVotes sends only the votes this validator signed, and tells a
// subscription cancelled for falling behind (made again) from one ended
// with the bus (not made again).
func TestPushVotesOwnOnly(t *testing.T) {
	self := ed25519.GenPrivKey().PubKey().Address()
	other := ed25519.GenPrivKey().PubKey().Address()
	for _, tc := range []struct {
		name  string
		err   error
		again bool
	}{
		{"out of capacity", cmtpubsub.ErrOutOfCapacity, true},
		{"bus stopped", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := &fakeSubscription{out: make(chan cmtpubsub.Message, 4), canceled: make(chan struct{})}
			sub.out <- cmtpubsub.NewMessage(types.EventDataVote{Vote: pushTestVote(other, 3, 1)}, nil)
			sub.out <- cmtpubsub.NewMessage(types.EventDataVote{Vote: pushTestVote(self, 3, 0)}, nil)
			sub.out <- cmtpubsub.NewMessage(types.EventDataNewRound{Height: 3}, nil)
			var sent []*types.Vote
			done := make(chan bool)
			go func() {
				done <- pushVotes(context.Background(), sub, func() crypto.Address { return self }, func(v *types.Vote) { sent = append(sent, v) })
			}()
			// Cancel once the three events are taken (select would pick at
			// random between a cancellation and a waiting event).
			for len(sub.out) > 0 {
				time.Sleep(time.Millisecond)
			}
			sub.err = tc.err
			close(sub.canceled)
			if again := <-done; again != tc.again {
				t.Errorf("pushVotes returned %v, want %v", again, tc.again)
			}
			if len(sent) != 1 || !bytes.Equal(sent[0].ValidatorAddress, self) {
				t.Fatalf("sent %v, want only this validator's vote", sent)
			}
		})
	}
}

// pushVotes ends when its context does.
func TestPushVotesStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sub := &fakeSubscription{out: make(chan cmtpubsub.Message), canceled: make(chan struct{})}
	done := make(chan bool)
	go func() { done <- pushVotes(ctx, sub, func() crypto.Address { return nil }, func(*types.Vote) {}) }()
	cancel()
	select {
	case again := <-done:
		if again {
			t.Error("pushVotes asked to resubscribe after its context ended")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pushVotes did not return after its context ended")
	}
}
