package fsm

import "github.com/stele-io/stele/internal/fsm/subjects"

// The subjects module's names the broker uses, under the package it
// imports (core_api.go says why).

type (
	SubjectRecord    = subjects.Record
	SubjectCount     = subjects.SubjectCount
	SubjectReadStats = subjects.ReadStats
)
