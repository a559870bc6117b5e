package cometbft

// Votes sent the moment they are made.
//
// CometBFT's consensus reactor sends votes to a peer from one goroutine per
// peer that looks for a vote the peer lacks and, finding none, sleeps
// peer_gossip_sleep_duration (5 ms here) before it looks again. A vote this
// broker makes while that goroutine sleeps waits for the rest of the sleep,
// 2.5 ms on average, on each of a height's two vote rounds. The pusher
// removes that wait for the broker's own votes: it follows the node's event
// bus, and each vote it sees signed by this broker's key goes at once to
// every peer and is marked as known to it in the reactor's view of the peer
// (consensus.PeerState), so that the gossip routine does not send it again.
// A peer that already has the vote, or is at another height, ignores it
// (CometBFT drops a duplicate vote and a vote for another height without
// counting it against the peer); the mark is only set where the reactor
// believes the peer is at the vote's height and round, so the gossip
// routine still sends it to a peer that was behind. Gossip itself is
// unchanged and keeps relaying the other validators' votes.

import (
	"bytes"
	"context"
	"log/slog"

	"github.com/cometbft/cometbft/consensus"
	"github.com/cometbft/cometbft/crypto"
	"github.com/cometbft/cometbft/node"
	"github.com/cometbft/cometbft/p2p"
	cmtcons "github.com/cometbft/cometbft/proto/tendermint/consensus"
	"github.com/cometbft/cometbft/types"
)

// pushSubscriber names the pusher's event bus subscription.
const pushSubscriber = "stele-vote-push"

// pushCapacity is how many vote events the subscription buffers. Four are
// made per validator and height; a subscriber that falls this far behind is
// cancelled by the event bus (never blocking consensus) and resubscribes.
const pushCapacity = 1024

// startVotePush sends this node's own votes to its peers as they are made,
// until ctx ends or the node's event bus stops.
func startVotePush(ctx context.Context, n *node.Node, logger *slog.Logger) {
	self := func() crypto.Address {
		pub, err := n.PrivValidator().GetPubKey()
		if err != nil {
			return nil
		}
		return pub.Address()
	}
	send := func(v *types.Vote) { pushVote(n.Switch().Peers().Copy(), v) }
	go func() {
		for ctx.Err() == nil {
			sub, err := n.EventBus().Subscribe(ctx, pushSubscriber, types.EventQueryVote, pushCapacity)
			if err != nil {
				// The bus is stopping: nothing more to push.
				logger.Debug("vote push stopped", "err", err)
				return
			}
			if !pushVotes(ctx, sub, self, send) || !n.EventBus().IsRunning() {
				return
			}
			// Cancelled for falling behind: the votes missed are gossiped.
			_ = n.EventBus().Unsubscribe(context.Background(), pushSubscriber, types.EventQueryVote)
			logger.Debug("vote push resubscribing", "err", sub.Err())
		}
	}()
}

// pushVotes hands send each vote sub delivers that self() signed. It
// returns false once ctx ends or the subscription ends without an error
// (the bus stopped), true when the bus cancelled it for falling behind and
// it may be made again.
func pushVotes(ctx context.Context, sub types.Subscription, self func() crypto.Address, send func(*types.Vote)) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-sub.Canceled():
			return sub.Err() != nil && ctx.Err() == nil
		case msg := <-sub.Out():
			ev, ok := msg.Data().(types.EventDataVote)
			if !ok || ev.Vote == nil {
				continue
			}
			if addr := self(); addr != nil && bytes.Equal(ev.Vote.ValidatorAddress, addr) {
				send(ev.Vote)
			}
		}
	}
}

// pushVote queues vote to each of peers whose connection has room and marks
// it known to the peer, as the reactor's own gossip does after a send. A
// peer the reactor has not set up yet (no PeerState) is left to gossip.
func pushVote(peers []p2p.Peer, vote *types.Vote) {
	env := p2p.Envelope{ChannelID: consensus.VoteChannel, Message: &cmtcons.Vote{Vote: vote.ToProto()}}
	for _, peer := range peers {
		ps, ok := peer.Get(types.PeerStateKey).(*consensus.PeerState)
		if !ok {
			continue
		}
		if peer.TrySend(env) {
			ps.SetHasVote(vote)
		}
	}
}
