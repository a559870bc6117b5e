package cometbft

import (
	stded25519 "crypto/ed25519"
	"fmt"
	"path/filepath"

	"github.com/cometbft/cometbft/crypto/ed25519"
	"github.com/cometbft/cometbft/types"

	"github.com/stele-io/stele/internal/fsm"
)

// ValidatorKey returns the home's validator private key as a standard
// ed25519 key, and its address. The data plane signs batch statements with
// it (fsm.Statement: a prefix no CometBFT sign-bytes share), so that
// certificates verify against the genesis validators' keys.
func ValidatorKey(home string) (stded25519.PrivateKey, [20]byte, error) {
	return ValidatorKeyFile(filepath.Join(home, privValKeyFile))
}

// ValidatorKeyFile is ValidatorKey of a key file (a home's
// config/priv_validator_key.json): what a validator signs upgrade votes
// with (stele cluster upgrade --key).
func ValidatorKeyFile(path string) (stded25519.PrivateKey, [20]byte, error) {
	var addr [20]byte
	key, err := readPrivValKey(path)
	if err != nil {
		return nil, addr, err
	}
	priv, ok := key.PrivKey.(ed25519.PrivKey)
	if !ok || len(priv) != stded25519.PrivateKeySize {
		return nil, addr, fmt.Errorf("stele/consensus/cometbft: validator key is %s, the data plane needs ed25519", key.PrivKey.Type())
	}
	copy(addr[:], key.PubKey.Address())
	return stded25519.PrivateKey(append([]byte(nil), priv...)), addr, nil
}

// Validators returns a genesis's validators as the state machine's
// validator set, which checks batch certificates.
func Validators(doc *types.GenesisDoc) (*fsm.ValidatorSet, error) {
	var vals []fsm.Validator
	for _, v := range doc.Validators {
		pub, ok := v.PubKey.(ed25519.PubKey)
		if !ok || len(pub) != stded25519.PublicKeySize {
			return nil, fmt.Errorf("stele/consensus/cometbft: genesis validator %s has a %s key, the data plane needs ed25519", v.Address, v.PubKey.Type())
		}
		var addr [20]byte
		copy(addr[:], pub.Address())
		vals = append(vals, fsm.Validator{Address: addr, PubKey: stded25519.PublicKey(append([]byte(nil), pub...)), Power: v.Power})
	}
	return fsm.NewValidatorSet(vals)
}
