// register.go is the register workload's model: independent integer registers, one per
// key, read, written and compare-and-set, each key checked on its own (porcupine's
// partitions).

package main

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/anishathalye/porcupine"
)

// regInput is what a register call asked for.
type regInput struct {
	Kind  string // "read", "write" or "cas"
	Key   int64
	Value int64 // write
	From  int64 // cas: the value it expects
	To    int64 // cas: the value it sets
}

// regOutput is what it observed.
type regOutput struct {
	Unknown bool  // the outcome is unknown: any output goes
	Refused bool  // cas: a definite failure because the register did not hold From
	Value   int64 // read
}

type registerWorkload struct {
	initial int64
}

func newRegister(initial json.RawMessage) (*registerWorkload, error) {
	var init struct {
		Value *int64 `json:"value"`
	}
	if err := decodeStrict(initial, "register \"initial\" (expected {\"value\": N}, every key's value before the history)", &init); err != nil {
		return nil, err
	}
	if init.Value == nil {
		return nil, fmt.Errorf("the register \"initial\" needs \"value\", every key's value before the history")
	}
	return &registerWorkload{initial: *init.Value}, nil
}

func (w *registerWorkload) Name() string { return "register" }

// parse reads one recorded call; keep is false for calls that neither changed nor observed
// anything (definite failures other than a refused cas, reads of unknown outcome).
func (w *registerWorkload) parse(op *RawOp) (in regInput, out regOutput, keep bool, err error) {
	in.Kind = op.F
	switch op.F {
	case "read":
		var i struct{ Key int64 }
		err = decodeStrict(op.Input, "read input (expected {\"key\": K})", &i)
		in.Key = i.Key
		if err == nil && op.Type == TypeOK {
			var o struct{ Value *int64 }
			if err = decodeStrict(op.Output, "read output (expected {\"value\": V})", &o); err == nil && o.Value == nil {
				err = fmt.Errorf("a read that succeeded needs its output {\"value\": V}")
			}
			if err == nil {
				out.Value = *o.Value
			}
		}
		return in, out, op.Type == TypeOK, err
	case "write":
		var i struct{ Key, Value int64 }
		err = decodeStrict(op.Input, "write input (expected {\"key\": K, \"value\": V})", &i)
		in.Key, in.Value = i.Key, i.Value
		out.Unknown = op.Type == TypeInfo
		return in, out, op.Type != TypeFail, err
	case "cas":
		var i struct{ Key, From, To int64 }
		err = decodeStrict(op.Input, "cas input (expected {\"key\": K, \"from\": A, \"to\": B})", &i)
		in.Key, in.From, in.To = i.Key, i.From, i.To
		out.Unknown = op.Type == TypeInfo
		if err == nil && op.Type == TypeFail {
			out.Refused, err = refused(op)
			return in, out, out.Refused, err
		}
		return in, out, true, err
	}
	return in, out, false, fmt.Errorf("the register workload has read, write and cas, not %q", op.F)
}

// refused reads a failed call's {"refused": true}: the procedure declined after looking at
// the data, which is an observation; any other definite failure observed nothing.
func refused(op *RawOp) (bool, error) {
	if len(op.Output) == 0 || string(op.Output) == "null" {
		return false, nil
	}
	var o struct{ Refused bool }
	if err := decodeStrict(op.Output, "failure output (expected {\"refused\": true} or none)", &o); err != nil {
		return false, err
	}
	return o.Refused, nil
}

func (w *registerWorkload) Operations(ops []RawOp) ([]porcupine.Operation, error) {
	var out []porcupine.Operation
	for i := range ops {
		op := &ops[i]
		if op.Type == TypeNemesis {
			continue
		}
		in, o, keep, err := w.parse(op)
		if err != nil {
			return nil, fmt.Errorf("operation %d: %v", op.Index, err)
		}
		if keep {
			out = append(out, porcupine.Operation{ClientId: op.Client, Input: in, Call: op.Call, Output: o, Return: op.ReturnTime(), Metadata: op.Index})
		}
	}
	return out, nil
}

// Invariants finds reads of values that no write or cas of that key, invoked before the
// read returned and not known to have failed, could have put there.
func (w *registerWorkload) Invariants(ops []RawOp) []string {
	written := map[[2]int64][]int64{} // (key, value) -> call times
	for i := range ops {
		in, o, keep, err := w.parse(&ops[i])
		if err != nil || !keep || o.Refused {
			continue
		}
		switch in.Kind {
		case "write":
			written[[2]int64{in.Key, in.Value}] = append(written[[2]int64{in.Key, in.Value}], ops[i].Call)
		case "cas":
			written[[2]int64{in.Key, in.To}] = append(written[[2]int64{in.Key, in.To}], ops[i].Call)
		}
	}
	var found []string
	for i := range ops {
		op := &ops[i]
		in, o, keep, err := w.parse(op)
		if err != nil || !keep || in.Kind != "read" || o.Value == w.initial {
			continue
		}
		possible := false
		for _, call := range written[[2]int64{in.Key, o.Value}] {
			possible = possible || call <= op.ReturnTime()
		}
		if !possible {
			found = append(found, fmt.Sprintf("operation %d: client %d read key %d = %d, a value no write or cas of key %d invoked before that read returned could have stored (and not its initial %d)",
				op.Index, op.Client, in.Key, o.Value, in.Key, w.initial))
		}
	}
	return found
}

func (w *registerWorkload) Model() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[int64][]porcupine.Operation{}
			for _, op := range history {
				k := op.Input.(regInput).Key
				byKey[k] = append(byKey[k], op)
			}
			keys := make([]int64, 0, len(byKey))
			for k := range byKey {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
			parts := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				parts = append(parts, byKey[k])
			}
			return parts
		},
		Init: func() interface{} { return w.initial },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			return registerStep(state.(int64), input.(regInput), output.(regOutput))
		},
		Hash:              func(state interface{}) uint64 { return uint64(state.(int64)) },
		DescribeOperation: describeRegister,
		DescribeState:     func(state interface{}) string { return fmt.Sprintf("%d", state.(int64)) },
		DescribeOperationMetadata: func(info interface{}) string {
			if info == nil {
				return ""
			}
			return fmt.Sprintf("operation %v of the history file", info)
		},
	}
}

// registerStep is one register's sequential specification.
func registerStep(state int64, in regInput, out regOutput) (bool, interface{}) {
	switch in.Kind {
	case "read":
		return out.Value == state, state
	case "write":
		return true, in.Value
	case "cas":
		switch {
		case out.Refused:
			return state != in.From, state
		case state == in.From:
			return true, in.To
		default:
			// Only an unknown outcome may meet another value: the cas then did nothing.
			return out.Unknown, state
		}
	}
	return false, state
}

func describeRegister(input, output interface{}) string {
	in, out := input.(regInput), output.(regOutput)
	var call string
	switch in.Kind {
	case "read":
		call = fmt.Sprintf("read(key %d)", in.Key)
	case "write":
		call = fmt.Sprintf("write(key %d, %d)", in.Key, in.Value)
	case "cas":
		call = fmt.Sprintf("cas(key %d, %d -> %d)", in.Key, in.From, in.To)
	}
	switch {
	case out.Unknown:
		return call + " -> unknown"
	case out.Refused:
		return call + " -> refused"
	case in.Kind == "read":
		return fmt.Sprintf("%s -> %d", call, out.Value)
	default:
		return call + " -> ok"
	}
}

func (w *registerWorkload) PartitionName(part []porcupine.Operation) string {
	if len(part) == 0 {
		return "register"
	}
	return fmt.Sprintf("key %d", part[0].Input.(regInput).Key)
}
