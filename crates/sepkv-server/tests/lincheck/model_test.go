package main

import (
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// check parses a hand-written history and checks it.
func check(t *testing.T, js string) bool {
	t.Helper()
	_, ops, _, err := Read(strings.NewReader(js))
	if err != nil {
		t.Fatalf("history refused: %v", err)
	}
	return porcupine.CheckOperations(Model, ops)
}

func want(t *testing.T, js string, linearizable bool) {
	t.Helper()
	got := check(t, js)
	if got != linearizable {
		t.Fatalf("linearizable: got %v, want %v", got, linearizable)
	}
}

func TestStaleReadAfterCompletedWriteIsAViolation(t *testing.T) {
	want(t, `{"ops": [
		{"client": 0, "op": "set", "key": "a", "arg": 1, "call": 0, "ret": 10},
		{"client": 0, "op": "set", "key": "a", "arg": 2, "call": 20, "ret": 30},
		{"client": 1, "op": "get", "key": "a", "call": 40, "ret": 50, "out": 1}]}`, false)
}

func TestReadOfAValueNeverWrittenIsAViolation(t *testing.T) {
	want(t, `{"ops": [
		{"client": 0, "op": "set", "key": "a", "arg": 1, "call": 0, "ret": 10},
		{"client": 1, "op": "get", "key": "a", "call": 5, "ret": 15, "out": 7}]}`, false)
}

func TestOverlappingOperationsMayTakeEitherOrder(t *testing.T) {
	// The read overlaps both writes: either value, or none, is fine.
	for _, out := range []string{"null", "1", "2"} {
		want(t, `{"ops": [
			{"client": 0, "op": "set", "key": "a", "arg": 1, "call": 0, "ret": 100},
			{"client": 1, "op": "set", "key": "a", "arg": 2, "call": 10, "ret": 90},
			{"client": 2, "op": "get", "key": "a", "call": 5, "ret": 95, "out": `+out+`}]}`, true)
	}
}

func TestTwoReadsMustAgreeOnTheOrderOfConcurrentWrites(t *testing.T) {
	// Client 2 sees 2 then 1 and client 3 sees 1 then 2, after both
	// writes completed: no single order explains both.
	want(t, `{"ops": [
		{"client": 0, "op": "set", "key": "a", "arg": 1, "call": 0, "ret": 100},
		{"client": 1, "op": "set", "key": "a", "arg": 2, "call": 0, "ret": 100},
		{"client": 2, "op": "get", "key": "a", "call": 110, "ret": 120, "out": 2},
		{"client": 3, "op": "get", "key": "a", "call": 110, "ret": 120, "out": 1},
		{"client": 2, "op": "get", "key": "a", "call": 130, "ret": 140, "out": 1},
		{"client": 3, "op": "get", "key": "a", "call": 130, "ret": 140, "out": 2}]}`, false)
}

func TestIncrStartsFromZeroAndCounts(t *testing.T) {
	want(t, `{"ops": [
		{"client": 0, "op": "incr", "key": "c", "call": 0, "ret": 10, "out": 1},
		{"client": 1, "op": "incr", "key": "c", "call": 20, "ret": 30, "out": 2},
		{"client": 0, "op": "set", "key": "c", "arg": 10, "call": 40, "ret": 50},
		{"client": 1, "op": "incr", "key": "c", "call": 60, "ret": 70, "out": 11}]}`, true)
	// A lost increment: the second INCR ran against the state before the first.
	want(t, `{"ops": [
		{"client": 0, "op": "incr", "key": "c", "call": 0, "ret": 10, "out": 1},
		{"client": 1, "op": "incr", "key": "c", "call": 20, "ret": 30, "out": 1}]}`, false)
}

func TestIndeterminateWriteMayTakeEffectLateOrNever(t *testing.T) {
	// The SET never answered: a read long after may see it, or not.
	for _, out := range []string{"1", "2"} {
		want(t, `{"ops": [
			{"client": 0, "op": "set", "key": "a", "arg": 1, "call": 0, "ret": 10},
			{"client": 1, "op": "set", "key": "a", "arg": 2, "call": 20},
			{"client": 0, "op": "get", "key": "a", "call": 1000, "ret": 1010, "out": `+out+`}]}`, true)
	}
	// But not before it was invoked.
	want(t, `{"ops": [
		{"client": 0, "op": "set", "key": "a", "arg": 1, "call": 0, "ret": 10},
		{"client": 0, "op": "get", "key": "a", "call": 20, "ret": 30, "out": 2},
		{"client": 1, "op": "set", "key": "a", "arg": 2, "call": 40}]}`, false)
	// And once seen, it stays: reading the older value again is a violation.
	want(t, `{"ops": [
		{"client": 0, "op": "set", "key": "a", "arg": 1, "call": 0, "ret": 10},
		{"client": 1, "op": "set", "key": "a", "arg": 2, "call": 20},
		{"client": 0, "op": "get", "key": "a", "call": 30, "ret": 40, "out": 2},
		{"client": 0, "op": "get", "key": "a", "call": 50, "ret": 60, "out": 1}]}`, false)
}

func TestIndeterminateIncrAppliesAtMostOnce(t *testing.T) {
	want(t, `{"ops": [
		{"client": 0, "op": "incr", "key": "c", "call": 0},
		{"client": 1, "op": "get", "key": "c", "call": 100, "ret": 110, "out": 1}]}`, true)
	want(t, `{"ops": [
		{"client": 0, "op": "incr", "key": "c", "call": 0},
		{"client": 1, "op": "get", "key": "c", "call": 100, "ret": 110, "out": 2}]}`, false)
}

func TestAFailedWriteThatTookEffectIsAViolation(t *testing.T) {
	want(t, `{"ops": [
		{"client": 0, "op": "set", "key": "a", "arg": 1, "call": 0, "ret": 10},
		{"client": 1, "op": "set", "key": "a", "arg": 2, "call": 20, "ret": 25, "failed": true},
		{"client": 0, "op": "get", "key": "a", "call": 30, "ret": 40, "out": 2}]}`, false)
	want(t, `{"ops": [
		{"client": 0, "op": "incr", "key": "c", "call": 0, "ret": 10, "failed": true},
		{"client": 0, "op": "get", "key": "c", "call": 30, "ret": 40, "out": null}]}`, true)
}

func TestKeysAreIndependent(t *testing.T) {
	want(t, `{"ops": [
		{"client": 0, "op": "set", "key": "a", "arg": 1, "call": 0, "ret": 10},
		{"client": 1, "op": "get", "key": "b", "call": 20, "ret": 30, "out": null},
		{"client": 1, "op": "get", "key": "a", "call": 40, "ret": 50, "out": 1}]}`, true)
}

func TestUnansweredReadsAreLeftOut(t *testing.T) {
	_, ops, c, err := Read(strings.NewReader(`{"ops": [
		{"client": 0, "op": "get", "key": "a", "call": 0},
		{"client": 0, "op": "set", "key": "a", "arg": 3, "call": 5}]}`))
	if err != nil || len(ops) != 1 || c.DroppedReads != 1 || c.Indeterminate != 1 || c.Ops != 2 {
		t.Fatalf("got %d ops, %+v, %v", len(ops), c, err)
	}
}

func TestBadHistoriesAreRefusedWithAReason(t *testing.T) {
	for js, reason := range map[string]string{
		`[1, 2]`: "not a history",
		`{}`:     "no \"ops\"",
		`{"ops": [{"client": 0, "op": "del", "key": "a", "call": 0, "ret": 1}]}`:  "unknown op",
		`{"ops": [{"client": 0, "op": "set", "key": "a", "call": 0, "ret": 1}]}`:  "without \"arg\"",
		`{"ops": [{"client": 0, "op": "incr", "key": "a", "call": 0, "ret": 1}]}`: "without \"out\"",
		`{"ops": [{"client": 0, "op": "get", "key": "a", "call": 9, "ret": 1}]}`:  "before its call",
		`{"ops": [{"client": 0, "op": "get", "key": "a", "call": 0, "rte": 1}]}`:  "unknown field",
	} {
		_, _, _, err := Read(strings.NewReader(js))
		if err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: got %v, want an error saying %q", js, err, reason)
		}
	}
}
