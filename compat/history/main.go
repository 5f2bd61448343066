// Command history-check checks a history recorded against Lockstep for linearizability
// (porcupine) under the register or bank model, and explains any anomaly it finds.
//
// Usage: history-check [-all] [-html FILE] [-timeout DURATION] HISTORY
//
// Exit status: 0 the history is linearizable; 1 an anomaly was found (explained on
// stdout); 2 the history or the command line could not be read; 3 the check ran out of
// time before reaching a verdict.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

// Exit statuses.
const (
	exitOK           = 0
	exitAnomaly      = 1
	exitBadInput     = 2
	exitInconclusive = 3
)

// anomaliesShownMax caps the anomalies printed without -all: one lost write can make every
// later read an anomaly.
const anomaliesShownMax = 10

// checkTimeoutDefault bounds porcupine's search; linearizability checking is NP-hard, and
// a verdict that never comes is worse than an "inconclusive".
const checkTimeoutDefault = 5 * time.Minute

func main() {
	html := flag.String("html", "", "on an anomaly, write porcupine's visualization of the history to this HTML file")
	all := flag.Bool("all", false, fmt.Sprintf("list every anomaly, not only the first %d", anomaliesShownMax))
	timeout := flag.Duration("timeout", checkTimeoutDefault, "give up (exit 3, inconclusive) after this long")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: history-check [-all] [-html FILE] [-timeout DURATION] HISTORY\n"+
			"Checks a recorded history (JSON lines, or one JSON document) for linearizability.\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(exitBadInput)
	}
	os.Exit(run(flag.Arg(0), *html, *all, *timeout))
}

func run(path, html string, all bool, timeout time.Duration) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "history-check: %v\n", err)
		return exitBadInput
	}
	defer f.Close()
	h, err := ReadHistory(f)
	if err == nil {
		var r *Report
		if r, err = Check(h, timeout); err == nil {
			return report(path, html, all, r)
		}
	}
	fmt.Fprintf(os.Stderr, "history-check: %s: %v\n", path, err)
	return exitBadInput
}

func report(path, html string, all bool, r *Report) int {
	fmt.Printf("%s: %s workload, %d operations (%d of unknown outcome), %d checked by porcupine in %s: %s\n",
		path, r.Workload.Name(), r.Total, r.Unknown, r.Checked, r.Elapsed.Round(time.Millisecond), verdict(r))
	if !r.Failed() {
		if r.Result == porcupine.Unknown {
			fmt.Printf("inconclusive: the search ran out of time; run again with a longer -timeout or a shorter history\n")
			return exitInconclusive
		}
		return exitOK
	}
	for i, a := range r.Anomalies {
		if i == anomaliesShownMax && !all {
			fmt.Printf("... and %d more anomalies (-all lists them)\n", len(r.Anomalies)-i)
			break
		}
		fmt.Printf("anomaly %d: %s\n", i+1, a)
	}
	if html != "" {
		if err := porcupine.VisualizePath(r.Workload.Model(), r.Info, html); err != nil {
			fmt.Printf("could not write the visualization: %v\n", err)
		} else {
			fmt.Printf("visualization: %s (open it in a browser: one row per client; point at an operation to see the longest order found that includes it and the state after each step)\n", html)
		}
	}
	return exitAnomaly
}

func verdict(r *Report) string {
	switch {
	case r.Failed():
		if len(r.Anomalies) == 1 {
			return "1 ANOMALY"
		}
		return fmt.Sprintf("%d ANOMALIES", len(r.Anomalies))
	case r.Result == porcupine.Unknown:
		return "INCONCLUSIVE"
	default:
		return "linearizable, no anomalies"
	}
}
