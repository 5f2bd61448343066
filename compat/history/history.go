// history.go reads a recorded history: a header naming the workload and its initial state,
// then one record per operation (JSON lines), or the same as one JSON document.

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// The completion types of an operation, named as Jepsen names them.
const (
	// TypeOK: the call succeeded; its output is what the database answered.
	TypeOK = "ok"
	// TypeFail: a definite failure; the transaction did not happen. A workload may read
	// an observation from it (a transfer refused for lack of money: output.refused).
	TypeFail = "fail"
	// TypeInfo: the outcome is unknown (connection lost, timeout, RESPONSE_UNKNOWN): it
	// may take effect at any time after its invocation, or never.
	TypeInfo = "info"
	// TypeNemesis: a fault the test injected (kill, restart, pause, resume); not checked,
	// shown in explanations and in the visualization.
	TypeNemesis = "nemesis"
)

// Never is the return time given to operations of unknown outcome: they stay concurrent
// with everything invoked after them, which is how porcupine lets them take effect at
// any later point, or (placed last) never.
const Never = math.MaxInt64

// Header is the first JSON value of a history file.
type Header struct {
	// Workload is "register" or "bank".
	Workload string `json:"workload"`
	// Initial is the workload's initial state (see each workload).
	Initial json.RawMessage `json:"initial"`
	// Ops holds the operations when the whole history is one JSON document; in the
	// JSON-lines form it is absent and every following value is one operation.
	Ops []RawOp `json:"ops"`
}

// RawOp is one operation as recorded: its invocation and its completion together.
type RawOp struct {
	// Client is the process that made the call (zero-based). A process whose call had an
	// unknown outcome continues under a new number, as in Jepsen.
	Client int `json:"client"`
	// F is the operation's kind within its workload ("read", "write", "cas", "transfer").
	F      string          `json:"f"`
	Input  json.RawMessage `json:"input"`
	Type   string          `json:"type"`
	Output json.RawMessage `json:"output"`
	// Call and Return are nanoseconds on one monotonic clock of the recording process.
	// Return is ignored for operations of unknown outcome.
	Call   int64  `json:"call"`
	Return *int64 `json:"return"`
	// Proc is the procedure that ran the call, for people reading the history.
	Proc string `json:"proc,omitempty"`
	// Error is the failure's message (fail and info), for people reading the history.
	Error string `json:"error,omitempty"`
	// Index is the operation's position in the file, from 1, for messages.
	Index int `json:"-"`
}

// ReturnTime is when the operation completed, or Never when its outcome is unknown.
func (op *RawOp) ReturnTime() int64 {
	if op.Type == TypeInfo || op.Return == nil {
		return Never
	}
	return *op.Return
}

// History is a parsed history file.
type History struct {
	Header Header
	Ops    []RawOp
}

// ReadHistory reads either form from r and checks each operation's common fields.
func ReadHistory(r io.Reader) (*History, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var h History
	if err := dec.Decode(&h.Header); err != nil {
		return nil, fmt.Errorf("the history must start with a JSON header such as "+
			"{\"workload\":\"register\",\"initial\":{\"value\":0}}: %v", err)
	}
	if h.Header.Workload == "" {
		return nil, errors.New("the header (the first JSON value) has no \"workload\": name the model to check, \"register\" or \"bank\"")
	}
	if h.Header.Ops != nil {
		h.Ops = h.Header.Ops
		h.Header.Ops = nil
		if dec.More() {
			return nil, errors.New("a history document with \"ops\" must be the only JSON value in the file")
		}
	} else {
		for dec.More() {
			var op RawOp
			if err := dec.Decode(&op); err != nil {
				return nil, fmt.Errorf("operation %d: not a JSON operation record: %v", len(h.Ops)+1, err)
			}
			h.Ops = append(h.Ops, op)
		}
	}
	for i := range h.Ops {
		h.Ops[i].Index = i + 1
		if err := validate(&h.Ops[i]); err != nil {
			return nil, fmt.Errorf("operation %d: %v", i+1, err)
		}
	}
	return &h, nil
}

func validate(op *RawOp) error {
	switch op.Type {
	case TypeOK, TypeFail:
		if op.Return == nil {
			return fmt.Errorf("a %q operation needs its \"return\" time", op.Type)
		}
		if *op.Return < op.Call {
			return fmt.Errorf("returns (%d) before it was called (%d)", *op.Return, op.Call)
		}
	case TypeInfo, TypeNemesis:
	default:
		return fmt.Errorf("unknown \"type\" %q: use ok, fail, info (unknown outcome) or nemesis", op.Type)
	}
	if op.Client < 0 {
		return fmt.Errorf("\"client\" must be zero or more, not %d", op.Client)
	}
	if op.F == "" {
		return errors.New("no \"f\" (the operation's kind)")
	}
	return nil
}

// decodeStrict decodes raw into v, refusing absent values and unknown fields, so a typo in
// a hand-made history is an error instead of a zero.
func decodeStrict(raw json.RawMessage, what string, v interface{}) error {
	if len(raw) == 0 || string(raw) == "null" {
		return fmt.Errorf("no %s", what)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad %s %s: %v", what, string(raw), err)
	}
	return nil
}
