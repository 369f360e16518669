// Package main checks histories recorded against a replicated sepkv shard
// for linearizability, with porcupine as the checker.
//
// The model is one register per key holding an integer or nothing:
//
//   - SET k v sets it to v (the reply is OK);
//   - GET k returns its value, or nil when it holds nothing;
//   - INCR k adds one (nothing counts as 0) and returns the new value.
//
// An operation whose reply never came (a timeout, a dropped connection, an
// error from a node that may have proposed it) is indeterminate: it may
// take effect at any time after its invocation, or never. It is given an
// infinite return time and any reply is accepted for it, as porcupine
// expects. An indeterminate GET changes nothing and is left out. An
// operation the server refused (a definite failure) is left out too: if it
// took effect all the same, a read shows a value no write explains.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/anishathalye/porcupine"
)

// Op is one recorded operation, as the recorder writes it.
type Op struct {
	Client int    `json:"client"`
	Op     string `json:"op"`
	Key    string `json:"key"`
	// Arg is SET's value; absent for GET and INCR.
	Arg *int64 `json:"arg"`
	// Call and Ret are monotonic-clock readings in nanoseconds; Ret is
	// absent for an indeterminate operation.
	Call int64  `json:"call"`
	Ret  *int64 `json:"ret"`
	// Out is GET's value (absent or null: nil) or INCR's new value.
	Out *int64 `json:"out"`
	// Node and ID (the machine it was sent to and that machine's node
	// ID at the time) and Error (why it is indeterminate) are for
	// reading a history; the check ignores them.
	Node  int    `json:"node"`
	ID    string `json:"id"`
	Error string `json:"error"`
	// Failed marks a definite failure: the server said it did not take
	// effect. It is left out, so a read of its value is a violation.
	Failed bool `json:"failed"`
}

// History is the recorder's file.
type History struct {
	Seed int64 `json:"seed"`
	// Network is where the nodes ran: "network namespaces" or "loopback".
	Network string `json:"network"`
	// Faults counts what the nemesis did: "kills", "partitions",
	// "membership" (changes of the voters).
	Faults map[string]int `json:"faults"`
	// Events are the nemesis's steps, for reading a history.
	Events []Event `json:"events"`
	Ops    []Op    `json:"ops"`
}

// Event is one step of the nemesis: a kill, a restart, a cut, a heal.
type Event struct {
	// Time is a reading of the recorder's monotonic clock, in ns.
	Time int64  `json:"time"`
	What string `json:"what"`
}

type input struct {
	op  string
	key string
	arg int64
}

type output struct {
	unknown bool
	nil     bool
	v       int64
}

type state struct {
	set bool
	v   int64
}

// Model is the register-per-key model, partitioned by key.
var Model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, o := range h {
			k := o.Input.(input).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], o)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return state{} },
	Step: func(st, in, out interface{}) (bool, interface{}) {
		s, i, o := st.(state), in.(input), out.(output)
		switch i.op {
		case "set":
			return true, state{set: true, v: i.arg}
		case "incr":
			next := state{set: true, v: s.v + 1}
			return o.unknown || o.v == next.v, next
		default: // get
			if o.unknown {
				return true, s
			}
			if o.nil {
				return !s.set, s
			}
			return s.set && s.v == o.v, s
		}
	},
	DescribeOperation: func(in, out interface{}) string {
		i, o := in.(input), out.(output)
		res := fmt.Sprint(o.v)
		switch {
		case o.unknown:
			res = "unknown"
		case o.nil:
			res = "nil"
		case i.op == "set":
			res = "OK"
		}
		if i.op == "set" {
			return fmt.Sprintf("SET %s %d -> %s", i.key, i.arg, res)
		}
		return fmt.Sprintf("%s %s -> %s", map[string]string{"get": "GET", "incr": "INCR"}[i.op], i.key, res)
	},
	DescribeState: func(st interface{}) string {
		s := st.(state)
		if !s.set {
			return "nil"
		}
		return fmt.Sprint(s.v)
	},
}

// Counts describes a history.
type Counts struct {
	Ops, Indeterminate, Failed, DroppedReads, Keys int
}

// Read parses a history and turns it into porcupine operations; an
// indeterminate GET is dropped.
//
// Errors: malformed JSON, an unknown operation, a SET without its value, a
// return before its call.
func Read(r io.Reader) (History, []porcupine.Operation, Counts, error) {
	var h History
	var c Counts
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return h, nil, c, fmt.Errorf("not a history: %w", err)
	}
	if h.Ops == nil {
		return h, nil, c, errors.New("not a history: no \"ops\" list")
	}
	keys := map[string]bool{}
	ops := make([]porcupine.Operation, 0, len(h.Ops))
	for n, o := range h.Ops {
		if o.Failed {
			if o.Op != "set" && o.Op != "get" && o.Op != "incr" {
				return h, nil, c, fmt.Errorf("operation %d: unknown op %q (set, get or incr)", n, o.Op)
			}
			c.Failed++
			continue
		}
		in := input{op: o.Op, key: o.Key}
		out := output{}
		switch o.Op {
		case "set":
			if o.Arg == nil {
				return h, nil, c, fmt.Errorf("operation %d: SET without \"arg\"", n)
			}
			in.arg = *o.Arg
		case "get":
			if o.Out == nil {
				out.nil = true
			} else {
				out.v = *o.Out
			}
		case "incr":
			if o.Out == nil && o.Ret != nil {
				return h, nil, c, fmt.Errorf("operation %d: a completed INCR without \"out\"", n)
			}
			if o.Out != nil {
				out.v = *o.Out
			}
		default:
			return h, nil, c, fmt.Errorf("operation %d: unknown op %q (set, get or incr)", n, o.Op)
		}
		ret := int64(math.MaxInt64)
		if o.Ret == nil {
			out.unknown = true
			if o.Op == "get" {
				c.DroppedReads++
				continue
			}
			c.Indeterminate++
		} else {
			ret = *o.Ret
			if ret < o.Call {
				return h, nil, c, fmt.Errorf("operation %d: returns (%d) before its call (%d)", n, ret, o.Call)
			}
		}
		if o.Client < 0 {
			return h, nil, c, fmt.Errorf("operation %d: negative client %d", n, o.Client)
		}
		keys[o.Key] = true
		ops = append(ops, porcupine.Operation{ClientId: o.Client, Input: in, Call: o.Call, Output: out, Return: ret})
	}
	c.Ops = len(h.Ops)
	c.Keys = len(keys)
	return h, ops, c, nil
}
