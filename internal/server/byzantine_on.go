//go:build stelebyzantine

package server

import (
	"crypto/ed25519"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stele-io/stele/internal/consensus"
	"github.com/stele-io/stele/internal/consensus/cometbft"
	"github.com/stele-io/stele/internal/fsm"
	"github.com/stele-io/stele/internal/fsm/core"
)

// byzantineMembership is the forged-membership behaviour of the test-only
// `stelebyzantine` build: with forge-membership in STELE_BYZANTINE, every
// proposal this broker makes carries, after the proposer's append time, a
// membership change removing another validator that it signed alone or
// forged, bypassing every broker's CheckTx (docs/cluster.md, "Who may
// sign"), one form per proposal in turn:
//   - unsigned: no signature at all (honest validators reject the whole
//     proposal: the change fails the stateless check);
//   - under-signed: its own validator signature only (a vote, never enough
//     alone);
//   - forged: its own signature and made-up ones attributed to the other
//     validators;
//   - forged-admin: its own key's signature as the administrator's.
//
// Honest brokers must leave the membership as it was. Each forged change
// is logged ("byzantine: proposing a forged membership change") for the
// test to count. Production builds compile byzantine_off.go instead.
func byzantineMembership(app prefetchingApp, n *Node, home string) consensus.Application {
	if !slices.Contains(strings.Split(os.Getenv("STELE_BYZANTINE"), ","), "forge-membership") {
		return app
	}
	key, self, err := cometbft.ValidatorKey(home)
	if err != nil {
		panic(err) // a test build: the key was read before
	}
	return forgingApp{prefetchingApp: app, n: n, key: key, self: self, made: new(atomic.Uint64)}
}

type forgingApp struct {
	prefetchingApp
	n    *Node
	key  ed25519.PrivateKey
	self [20]byte
	made *atomic.Uint64 // the forged changes proposed so far
}

var forgeForms = []string{"unsigned", "under-signed", "forged", "forged-admin"}

func (a forgingApp) OpenProposal(height int64, now time.Time) [][]byte {
	opening := a.prefetchingApp.OpenProposal(height, now)
	st := a.n.fsm.Membership()
	var victim [20]byte
	var others [][20]byte
	for _, v := range a.n.fsm.CommittedValidators().Validators() {
		if v.Address != a.self {
			others = append(others, v.Address)
		}
	}
	if len(others) == 0 {
		return opening
	}
	victim = others[0]
	// In turn: its proposals come at every fourth height, so the height
	// would pick one form only.
	form := forgeForms[(a.made.Add(1)-1)%uint64(len(forgeForms))]
	c := fsm.ChangeMembership{ChainID: st.ChainID, Change: fsm.MembershipChange{Epoch: st.Epoch, Validator: victim, Remove: true}}
	switch form {
	case "under-signed":
		c.Sigs = append(c.Sigs, fsm.SignMembership(st.ChainID, c.Change, a.self, a.key))
	case "forged":
		c.Sigs = append(c.Sigs, fsm.SignMembership(st.ChainID, c.Change, a.self, a.key))
		for _, o := range others {
			s := fsm.SignMembership(st.ChainID, c.Change, o, a.key) // its own key, in another's name
			c.Sigs = append(c.Sigs, s)
		}
	case "forged-admin":
		c.AdminSig = ed25519.Sign(a.key, fsm.MembershipStatement(st.ChainID, c.Change))
	}
	var nonce core.Nonce
	copy(nonce[:], a.self[:])
	nonce[len(nonce)-1], nonce[len(nonce)-2] = byte(height), byte(height>>8)
	a.n.log.Warn("byzantine: proposing a forged membership change", "form", form, "height", height,
		"victim", strings.ToUpper(hex.EncodeToString(victim[:])))
	return append(opening, fsm.EncodeTx(core.Tx{Nonce: nonce, Commands: []core.Command{c}}))
}
