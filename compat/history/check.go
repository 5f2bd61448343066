// check.go runs a workload's direct checks and porcupine's linearizability check over a
// history, and explains a failure in words: which operations, at what times, could not be
// placed, after which order and in which state.

package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Workload is one model of the database the history is checked against.
type Workload interface {
	Name() string
	// Operations turns the recorded calls into porcupine's, leaving out those that neither
	// changed nor observed anything: definite failures other than refusals (they did not
	// happen) and reads of unknown outcome (they observed nothing anyone saw).
	Operations(ops []RawOp) ([]porcupine.Operation, error)
	// Invariants are checks of single operations, with plain explanations.
	Invariants(ops []RawOp) []string
	Model() porcupine.Model
	// PartitionName names one of the model's partitions in messages ("key 3").
	PartitionName(part []porcupine.Operation) string
}

// NewWorkload picks the model a history's header names.
func NewWorkload(h Header) (Workload, error) {
	switch h.Workload {
	case "register":
		return newRegister(h.Initial)
	case "bank":
		return newBank(h.Initial)
	}
	return nil, fmt.Errorf("unknown workload %q: the checker knows \"register\" and \"bank\"", h.Workload)
}

// Report is the outcome of a check.
type Report struct {
	Workload Workload
	// Result is porcupine's verdict: Ok, Illegal, or Unknown when it ran out of time.
	Result porcupine.CheckResult
	// Anomalies are readable explanations, empty when the history is fine.
	Anomalies []string
	// Checked counts the operations given to porcupine; Total all recorded calls.
	Checked, Total, Unknown int
	Info                    porcupine.LinearizationInfo
	Elapsed                 time.Duration
}

// Failed says whether the history shows an anomaly.
func (r *Report) Failed() bool { return len(r.Anomalies) > 0 || r.Result == porcupine.Illegal }

// Check checks a history; the error is for a history that cannot be read as its workload.
func Check(h *History, timeout time.Duration) (*Report, error) {
	w, err := NewWorkload(h.Header)
	if err != nil {
		return nil, err
	}
	ops, err := w.Operations(h.Ops)
	if err != nil {
		return nil, err
	}
	r := &Report{Workload: w, Checked: len(ops)}
	for _, op := range h.Ops {
		if op.Type != TypeNemesis {
			r.Total++
		}
		if op.Type == TypeInfo {
			r.Unknown++
		}
	}
	start := time.Now()
	model := w.Model()
	r.Result, r.Info = porcupine.CheckOperationsVerbose(model, ops, timeout)
	r.Elapsed = time.Since(start)
	// porcupine's explanations first: one per partition, each naming where the history
	// went wrong; the direct checks may repeat one cause for every later read.
	if r.Result == porcupine.Illegal {
		r.Anomalies = explain(w, model, ops, r.Info, h)
	}
	r.Anomalies = append(r.Anomalies, w.Invariants(h.Ops)...)
	annotate(&r.Info, h)
	return r, nil
}

// explain describes every partition porcupine could not linearize completely.
func explain(w Workload, model porcupine.Model, ops []porcupine.Operation, info porcupine.LinearizationInfo, h *History) []string {
	parts := [][]porcupine.Operation{ops}
	if model.Partition != nil {
		parts = model.Partition(ops)
	}
	partials := info.PartialLinearizationsOperations()
	var out []string
	for p, part := range parts {
		if p >= len(partials) {
			break
		}
		var longest []porcupine.Operation
		for _, l := range partials[p] {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) < len(part) {
			out = append(out, explainPartition(w, model, part, longest, h))
		}
	}
	if len(out) == 0 {
		out = append(out, "porcupine found the history not linearizable (no partition could be singled out)")
	}
	return out
}

// explainContextOps is how many operations of the best order found are shown before the
// point where it got stuck.
const explainContextOps = 6

// explainBlockedOps caps the operations listed as unable to come next.
const explainBlockedOps = 12

func explainPartition(w Workload, model porcupine.Model, part, longest []porcupine.Operation, h *History) string {
	origin := firstCall(h)
	state := model.Init()
	done := map[interface{}]bool{}
	for _, op := range longest {
		_, state = model.Step(state, op.Input, op.Output)
		done[op.Metadata] = true
	}
	var rest []porcupine.Operation
	for _, op := range part {
		if !done[op.Metadata] {
			rest = append(rest, op)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Call < rest[j].Call })
	deadline := int64(Never)
	for _, op := range rest {
		if op.Return < deadline {
			deadline = op.Return
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s is not linearizable: at best %d of its %d operations can be put in an order that respects real time and the model, ending in state %s.\n",
		w.Name(), w.PartitionName(part), len(longest), len(part), model.DescribeState(state))
	if len(longest) > 0 {
		from := len(longest) - explainContextOps
		if from < 0 {
			from = 0
		}
		fmt.Fprintf(&b, "  the end of that order:\n")
		for _, op := range longest[from:] {
			fmt.Fprintf(&b, "    %s\n", describeOp(model, op, h, origin))
		}
	}
	fmt.Fprintf(&b, "  then the next operation must be one of these (all invoked by %s, when the earliest of them returned), and none fits state %s:\n",
		stamp(deadline, origin), model.DescribeState(state))
	shown := 0
	for _, op := range rest {
		if op.Call > deadline {
			break
		}
		if shown == explainBlockedOps {
			fmt.Fprintf(&b, "    ... and more\n")
			break
		}
		fmt.Fprintf(&b, "    %s\n", describeOp(model, op, h, origin))
		shown++
	}
	if faults := faultsBetween(h, longestStart(longest, rest), deadline, origin); faults != "" {
		fmt.Fprintf(&b, "  faults injected around then: %s\n", faults)
	}
	return strings.TrimRight(b.String(), "\n")
}

func longestStart(longest, rest []porcupine.Operation) int64 {
	if len(longest) > 0 {
		return longest[len(longest)-1].Call
	}
	if len(rest) > 0 {
		return rest[0].Call
	}
	return 0
}

func describeOp(model porcupine.Model, op porcupine.Operation, h *History, origin int64) string {
	end := "never answered (unknown outcome)"
	if op.Return != Never {
		end = "returned " + stamp(op.Return, origin)
	}
	var via, why string
	if index, ok := op.Metadata.(int); ok && index >= 1 && index <= len(h.Ops) {
		raw := &h.Ops[index-1]
		if raw.Proc != "" {
			via = ", " + raw.Proc
		}
		if raw.Error != "" {
			why = " (" + raw.Error + ")"
		}
	}
	return fmt.Sprintf("[op %v, client %d%s] %s: invoked %s, %s%s", op.Metadata, op.ClientId, via, model.DescribeOperation(op.Input, op.Output), stamp(op.Call, origin), end, why)
}

// stamp shows a time as milliseconds since the history's first call.
func stamp(t, origin int64) string {
	if t == Never {
		return "never"
	}
	return fmt.Sprintf("t=%.3fms", float64(t-origin)/1e6)
}

func firstCall(h *History) int64 {
	origin := int64(Never)
	for _, op := range h.Ops {
		if op.Call < origin {
			origin = op.Call
		}
	}
	return origin
}

// faultsBetween lists the nemesis events in [from, to].
func faultsBetween(h *History, from, to int64, origin int64) string {
	var parts []string
	for _, op := range h.Ops {
		if op.Type == TypeNemesis && op.Call >= from && op.Call <= to {
			parts = append(parts, fmt.Sprintf("%s at %s", op.F, stamp(op.Call, origin)))
		}
	}
	return strings.Join(parts, ", ")
}

// annotate adds the injected faults to the visualization, on a row of their own.
func annotate(info *porcupine.LinearizationInfo, h *History) {
	var notes []porcupine.Annotation
	for _, op := range h.Ops {
		if op.Type != TypeNemesis {
			continue
		}
		end := op.Call
		if op.Return != nil {
			end = *op.Return
		}
		notes = append(notes, porcupine.Annotation{Tag: "faults", Start: op.Call, End: end, Description: op.F, Details: op.Error, BackgroundColor: "#f4c7c3"})
	}
	info.AddAnnotations(notes)
}
