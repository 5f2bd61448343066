// bank.go is the bank workload's model: N accounts whose balances move by transfers that
// refuse to overdraw, and reads of every balance at once. Every read must see a state the
// transfers could have produced in some order consistent with real time, and the money in
// every read must add up to the initial total.

package main

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// bankInput is what a bank call asked for.
type bankInput struct {
	Kind   string // "transfer" or "read"
	From   int
	To     int
	Amount int64
}

// bankOutput is what it observed.
type bankOutput struct {
	Unknown  bool    // the outcome is unknown: any output goes
	Refused  bool    // transfer: a definite failure because From held less than Amount
	Balances []int64 // read: every account's balance, in account order
}

// bankState is every balance, in account order; porcupine never sees it changed in place.
type bankState []int64

type bankWorkload struct {
	initial bankState
	total   int64
}

func newBank(initial json.RawMessage) (*bankWorkload, error) {
	var init struct {
		Balances []int64 `json:"balances"`
	}
	if err := decodeStrict(initial, "bank \"initial\" (expected {\"balances\": [B0, B1, ...]})", &init); err != nil {
		return nil, err
	}
	if len(init.Balances) < 2 {
		return nil, fmt.Errorf("the bank \"initial\" needs at least two balances, not %d", len(init.Balances))
	}
	w := &bankWorkload{initial: init.Balances}
	for _, b := range init.Balances {
		w.total += b
	}
	return w, nil
}

func (w *bankWorkload) Name() string { return "bank" }

func (w *bankWorkload) parse(op *RawOp) (in bankInput, out bankOutput, keep bool, err error) {
	in.Kind = op.F
	switch op.F {
	case "read":
		if op.Type == TypeOK {
			var o struct{ Balances []int64 }
			if err = decodeStrict(op.Output, "read output (expected {\"balances\": [...]})", &o); err == nil {
				out.Balances = o.Balances
			}
		}
		return in, out, op.Type == TypeOK, err
	case "transfer":
		var i struct {
			From, To int
			Amount   int64
		}
		if err = decodeStrict(op.Input, "transfer input (expected {\"from\": A, \"to\": B, \"amount\": N})", &i); err != nil {
			return in, out, false, err
		}
		in.From, in.To, in.Amount = i.From, i.To, i.Amount
		n := len(w.initial)
		if i.From < 0 || i.From >= n || i.To < 0 || i.To >= n || i.From == i.To || i.Amount <= 0 {
			return in, out, false, fmt.Errorf("a transfer moves a positive amount between two different accounts of 0..%d, not %s", n-1, string(op.Input))
		}
		out.Unknown = op.Type == TypeInfo
		if op.Type == TypeFail {
			out.Refused, err = refused(op)
			return in, out, out.Refused, err
		}
		return in, out, true, err
	}
	return in, out, false, fmt.Errorf("the bank workload has transfer and read, not %q", op.F)
}

func (w *bankWorkload) Operations(ops []RawOp) ([]porcupine.Operation, error) {
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

// Invariants checks each read on its own: every account there, none negative, and the
// money conserved.
func (w *bankWorkload) Invariants(ops []RawOp) []string {
	var found []string
	for i := range ops {
		op := &ops[i]
		in, o, keep, err := w.parse(op)
		if err != nil || !keep || in.Kind != "read" {
			continue
		}
		if len(o.Balances) != len(w.initial) {
			found = append(found, fmt.Sprintf("operation %d: client %d read %d balances, but there are %d accounts", op.Index, op.Client, len(o.Balances), len(w.initial)))
			continue
		}
		var sum int64
		for a, b := range o.Balances {
			sum += b
			if b < 0 {
				found = append(found, fmt.Sprintf("operation %d: client %d read account %d overdrawn (%d); transfers must refuse to overdraw", op.Index, op.Client, a, b))
			}
		}
		if sum != w.total {
			found = append(found, fmt.Sprintf("operation %d: client %d read balances adding up to %d, but the bank holds %d (money not conserved): %v", op.Index, op.Client, sum, w.total, o.Balances))
		}
	}
	return found
}

func (w *bankWorkload) Model() porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return w.initial },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			return bankStep(state.(bankState), input.(bankInput), output.(bankOutput))
		},
		Equal: func(a, b interface{}) bool { return equalBalances(a.(bankState), b.(bankState)) },
		Hash: func(state interface{}) uint64 {
			h := fnv.New64a()
			for _, b := range state.(bankState) {
				var buf [8]byte
				for i := range buf {
					buf[i] = byte(b >> (8 * i))
				}
				h.Write(buf[:])
			}
			return h.Sum64()
		},
		DescribeOperation: describeBank,
		DescribeState:     func(state interface{}) string { return fmt.Sprint([]int64(state.(bankState))) },
		DescribeOperationMetadata: func(info interface{}) string {
			if info == nil {
				return ""
			}
			return fmt.Sprintf("operation %v of the history file", info)
		},
	}
}

func equalBalances(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// bankStep is the bank's sequential specification.
func bankStep(state bankState, in bankInput, out bankOutput) (bool, interface{}) {
	switch in.Kind {
	case "read":
		return equalBalances(state, out.Balances), state
	case "transfer":
		enough := state[in.From] >= in.Amount
		switch {
		case out.Refused:
			return !enough, state
		case enough:
			next := make(bankState, len(state))
			copy(next, state)
			next[in.From] -= in.Amount
			next[in.To] += in.Amount
			return true, next
		default:
			// Only an unknown outcome may meet too little money: it was then refused.
			return out.Unknown, state
		}
	}
	return false, state
}

func describeBank(input, output interface{}) string {
	in, out := input.(bankInput), output.(bankOutput)
	if in.Kind == "read" {
		parts := make([]string, len(out.Balances))
		for i, b := range out.Balances {
			parts[i] = fmt.Sprint(b)
		}
		return "read() -> [" + strings.Join(parts, " ") + "]"
	}
	call := fmt.Sprintf("transfer(%d from account %d to %d)", in.Amount, in.From, in.To)
	switch {
	case out.Unknown:
		return call + " -> unknown"
	case out.Refused:
		return call + " -> refused"
	default:
		return call + " -> ok"
	}
}

func (w *bankWorkload) PartitionName([]porcupine.Operation) string { return "accounts" }
