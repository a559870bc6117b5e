package fsm

import "github.com/stele-io/stele/internal/fsm/producers"

// The producers module's names the broker uses, under the package it imports
// (core_api.go says why).

type (
	AddOffsetsToTxn    = producers.AddOffsetsToTxn
	AddPartitionsToTxn = producers.AddPartitionsToTxn
	EndTxn             = producers.EndTxn
	InitProducerID     = producers.InitProducerID
	TxnInfo            = producers.TxnInfo
	TxnOffsetCommit    = producers.TxnOffsetCommit
)

const (
	TxnOngoing = producers.TxnOngoing
)
