package fsm

import "github.com/stele-io/stele/internal/fsm/keys"

// The keys module's names the broker uses, under the package it imports
// (core_api.go says why).

type (
	KeyEvent = keys.KeyEvent
)

// The keys module's errors (the same values).
var (
	ErrNotTable = keys.ErrNotTable
)
