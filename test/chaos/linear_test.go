package chaos

import (
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestKeyVersionModel: the model accepts a linearizable history of
// conditional appends and refuses the anomalies it is for: two appends
// stating one version both succeeding, a refusal reporting a version the
// key was never at, an append succeeding at a version the key had left.
// An append with no answer may or may not have happened.
func TestKeyVersionModel(t *testing.T) {
	op := func(client int, call, ret int64, key string, expect int64, outcome string, version int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Call: call, Return: ret,
			Input: AppendInput{Key: key, Expect: expect}, Output: AppendOutput{Outcome: outcome, Version: version}}
	}
	good := []porcupine.Operation{
		op(0, 0, 10, "a", -1, AppendOK, 0),
		op(1, 5, 15, "a", -1, AppendConflict, 0), // overlaps the first, ordered after it
		op(0, 20, 30, "a", 0, AppendOK, 3),
		op(1, 21, 31, "a", 0, AppendConflict, 3),
		op(2, 22, 32, "b", NoExpectation, AppendOK, 4),
		op(2, 40, math.MaxInt64, "a", 3, AppendUnknown, 0), // no answer: written, as the next one shows
		op(0, 50, 60, "a", 3, AppendConflict, 7),
	}
	if !porcupine.CheckOperations(KeyVersionModel(), good) {
		t.Fatal("a linearizable history was refused")
	}
	for name, bad := range map[string][]porcupine.Operation{
		"two winners for one version": {
			op(0, 0, 10, "a", -1, AppendOK, 0),
			op(1, 20, 30, "a", 0, AppendOK, 1),
			op(2, 40, 50, "a", 0, AppendOK, 2),
		},
		"a refusal at a version never reached": {
			op(0, 0, 10, "a", -1, AppendOK, 0),
			op(1, 20, 30, "a", 5, AppendConflict, 9),
		},
		"a success at a version the key had left": {
			op(0, 0, 10, "a", -1, AppendOK, 0),
			op(0, 20, 30, "a", 0, AppendOK, 1),
			op(1, 40, 50, "a", 0, AppendOK, 2),
		},
		"a refusal of the version the key was at": {
			op(0, 0, 10, "a", -1, AppendOK, 0),
			op(1, 20, 30, "a", 0, AppendConflict, 0),
		},
	} {
		if porcupine.CheckOperations(KeyVersionModel(), bad) {
			t.Errorf("%s: accepted", name)
		}
	}
}
