package core

// Kind identifies a command in the encoding. Values are part of the on-chain
// format: never renumber one.
type Kind uint8

// Each module defines its command kinds next to its commands and
// registers them (registry.go); a kind's value is part of the on-chain
// format and is never reused.

// Command is one state change. A transaction carries one or more.
type Command interface {
	Kind() Kind
	Encode(w *Writer)
}
