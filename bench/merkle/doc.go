// Package merkle measures what a Merkle-authenticated key-value store costs
// on Stele's apply path, to choose the library that issue 16 puts all
// replicated state into (docs/benchmarks.md, "Authenticated state store:
// choosing the library").
//
// Every candidate runs over Pebble v2 with the options of Stele's metadata
// store (internal/storage.OpenStore), one database per candidate, and
// commits one block of updates with one Pebble batch, synced when the
// benchmark says so, the way Stele's FSM.persist does:
//
//   - pebble: plain Pebble writes of the same keys and values, what Stele
//     does today; the baseline the others are divided by.
//   - iavl: github.com/cosmos/iavl v1 (the Cosmos SDK's store) through a
//     small adapter from iavl's db.DB interface to Pebble; with its "fast
//     node" index (a flat copy of every key, the Cosmos SDK's default) and
//     without it (iavl-nofast).
//   - smt: github.com/pokt-network/smt, a sparse Merkle trie (the maintained
//     successor of celestiaorg/smt), its nodes and a flat copy of every value
//     in the same Pebble batch.
//
// This module is separate from Stele's so that Stele does not depend on the
// candidates. Nothing here is used by Stele.
package merkle
