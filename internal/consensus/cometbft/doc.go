// Package cometbft embeds a CometBFT v0.39 node in-process and drives a
// consensus.Application through it: Stele's only production ordering path
// (one validator for a single broker, 3f+1 for a cluster).
//
// A node's home is created by Init (one validator) or InitCluster (several
// homes sharing one genesis), in CometBFT's own layout:
//
//	config/config.toml                what the node runs with, for CometBFT's tools
//	config/genesis.json               chain ID, validators, consensus params, app_state
//	config/node_key.json              peer-to-peer identity
//	config/priv_validator_key.json    consensus signing key
//	data/priv_validator_state.json    last signed height/round/step (double-sign guard;
//	                                  CometBFT's JSON padded to 4 KiB, overwritten in place: signer.go)
//	data/*.db, data/cs.wal            block store, state, evidence (goleveldb), consensus WAL
//
// New and Start then run the node with the settings of Config. The
// application is wrapped as an ABCI++ application (abci.go): CheckTx admits,
// PrepareProposal and ProcessProposal apply ValidateTx and the chain's
// max_tx_bytes (kept in the genesis app_state so every validator applies
// the same limit), FinalizeBlock and Commit apply and persist. At start
// CometBFT's handshake replays every stored block above the application's
// Info height, so an application may persist lazily and report as retain
// height only what it has made durable.
//
// Blocks are made only for transactions (create_empty_blocks = false),
// plus an empty one every Config.CreateEmptyBlocksInterval so block time
// keeps moving. CometBFT also makes a block right after any block that
// changed the app hash (to sign that hash): an application that mixes the
// height or the block time into its app hash changes it on every block and
// keeps the node making blocks back to back, never idle. The app hash must
// change only when the replicated state does (the adapter logs a warning
// when an empty block changes it). A proposer about to propose an empty
// block waits up to 10 ms for a transaction first (abci.go,
// emptyProposalWait), so that a client's next request rides in that block.
//
// Each broker sends the votes it signs to its peers the moment they are
// made (push.go) instead of leaving them to CometBFT's gossip routines,
// which look for something to send every peer_gossip_sleep_duration.
//
// State sync (statesync.go, snapshot.go): an application implementing
// consensus.Snapshotter serves snapshots to peers, and a node with an empty
// state restores one (Config.StateSync) after verifying its app hash
// against the genesis validators' signatures, fetched from peers' RPC.
//
// Validator set changes come from the application (FinalizeBlock's
// validator updates, from fsm/cluster's membership); state sync trusts the
// genesis set, so a broker joining a cluster that has replaced most of its
// genesis validators replays instead (statesync.go).
//
// Not done yet: serving CometBFT's RPC beyond switching it on with
// Config.RPCListen (state sync needs it on the peers it names).
package cometbft
