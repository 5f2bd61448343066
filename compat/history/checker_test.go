// checker_test.go proves the checker both ways: the hand-made histories in testdata/ named
// ok_* are linearizable, and each bad_* one is reported with the anomaly it was built to
// show.

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const testTimeout = 30 * time.Second

func checkFile(t *testing.T, path string) *Report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := ReadHistory(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	r, err := Check(h, testTimeout)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r
}

func TestLinearizableHistoriesPass(t *testing.T) {
	files, _ := filepath.Glob("testdata/ok_*")
	if len(files) < 2 {
		t.Fatalf("expected the ok_ histories in testdata/, found %v", files)
	}
	for _, path := range files {
		r := checkFile(t, path)
		if r.Failed() || r.Result != porcupine.Ok {
			t.Errorf("%s: expected linearizable, got %s: %v", path, r.Result, r.Anomalies)
		}
		if r.Unknown == 0 {
			t.Errorf("%s: should include operations of unknown outcome", path)
		}
	}
}

// Each bad history, and words its explanation must contain.
var badHistories = map[string][]string{
	"bad_register_phantom_read.jsonl":       {"read key 1 = 9, a value no write", "register key 1 is not linearizable", "read(key 1) -> 9"},
	"bad_register_lost_write.jsonl":         {"register key 1 is not linearizable", "ending in state 5", "read(key 1) -> 0", "kill at"},
	"bad_register_failed_write_seen.jsonl":  {"read key 1 = 5, a value no write"},
	"bad_register_read_before_invoke.jsonl": {"read key 1 = 7, a value no write"},
	"bad_register_refused_cas.jsonl":        {"cas(key 1, 5 -> 6) -> refused"},
	"bad_bank_not_conserved.jsonl":          {"adding up to 25, but the bank holds 30", "read() -> [5 10 10]"},
	"bad_bank_stale_read.jsonl":             {"ending in state [5 15 10]", "read() -> [10 10 10]"},
	"bad_bank_refused_with_money.jsonl":     {"transfer(5 from account 0 to 1) -> refused"},
	"bad_bank_reads_disagree.jsonl":         {"read() -> [10 7 13]"},
}

func TestAnomaliesAreFoundAndExplained(t *testing.T) {
	files, _ := filepath.Glob("testdata/bad_*")
	if len(files) != len(badHistories) {
		t.Fatalf("testdata/ has %d bad_ histories, the test knows %d", len(files), len(badHistories))
	}
	for name, words := range badHistories {
		r := checkFile(t, filepath.Join("testdata", name))
		if !r.Failed() {
			t.Errorf("%s: the anomaly was not found", name)
			continue
		}
		text := strings.Join(r.Anomalies, "\n")
		for _, w := range words {
			if !strings.Contains(text, w) {
				t.Errorf("%s: the explanation lacks %q:\n%s", name, w, text)
			}
		}
	}
}

// Porcupine alone (without the direct checks) finds each anomaly too, so the direct
// checks only add words.
func TestPorcupineAloneFindsEveryAnomaly(t *testing.T) {
	for name := range badHistories {
		f, err := os.Open(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		h, err := ReadHistory(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		w, err := NewWorkload(h.Header)
		if err != nil {
			t.Fatal(err)
		}
		ops, err := w.Operations(h.Ops)
		if err != nil {
			t.Fatal(err)
		}
		if res := porcupine.CheckOperationsTimeout(w.Model(), ops, testTimeout); res != porcupine.Illegal {
			t.Errorf("%s: porcupine says %s", name, res)
		}
	}
}

// An unknown write may take effect long after it was invoked, or never: both readings of
// the same history are linearizable, and a definite failure may not take effect at all.
func TestUnknownOutcomesMayHappenLateOrNever(t *testing.T) {
	head := `{"workload":"register","initial":{"value":0}}` + "\n" +
		`{"client":0,"f":"write","input":{"key":1,"value":5},"type":"TYPE","call":0,"return":1}` + "\n"
	late := `{"client":1,"f":"read","input":{"key":1},"type":"ok","output":{"value":0},"call":10,"return":20}` + "\n" +
		`{"client":1,"f":"read","input":{"key":1},"type":"ok","output":{"value":5},"call":1000,"return":1001}` + "\n"
	never := `{"client":1,"f":"read","input":{"key":1},"type":"ok","output":{"value":0},"call":1000,"return":1001}` + "\n"
	cases := []struct {
		typ, tail string
		ok        bool
	}{
		{"info", late, true},
		{"info", never, true},
		{"ok", late, false},
		{"ok", never, false},
		{"fail", never, true},
		{"fail", late, false},
	}
	for _, c := range cases {
		h, err := ReadHistory(strings.NewReader(strings.Replace(head, "TYPE", c.typ, 1) + c.tail))
		if err != nil {
			t.Fatal(err)
		}
		r, err := Check(h, testTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if r.Failed() == c.ok {
			t.Errorf("write %s then %q: expected linearizable=%v, anomalies %v", c.typ, c.tail, c.ok, r.Anomalies)
		}
	}
}

func TestMalformedHistoriesAreRefusedWithTheirPlace(t *testing.T) {
	cases := map[string]string{
		`{"initial":{"value":0}}`:                  `no "workload"`,
		`{"workload":"queue","initial":{}}` + "\n": `unknown workload "queue"`,
		`{"workload":"register","initial":{"value":0}}` + "\n" + `{"client":0,"f":"read","input":{"key":1},"type":"maybe","call":0}`:                                   `operation 1: unknown "type" "maybe"`,
		`{"workload":"register","initial":{"value":0}}` + "\n" + `{"client":0,"f":"read","input":{"key":1},"type":"ok","call":5}`:                                      `operation 1: a "ok" operation needs its "return" time`,
		`{"workload":"register","initial":{"value":0}}` + "\n" + `{"client":0,"f":"read","input":{"kee":1},"type":"info","call":5}`:                                    `operation 1: bad read input`,
		`{"workload":"bank","initial":{"balances":[1,2]}}` + "\n" + `{"client":0,"f":"transfer","input":{"from":0,"to":0,"amount":1},"type":"ok","call":0,"return":1}`: `between two different accounts`,
	}
	for text, want := range cases {
		h, err := ReadHistory(strings.NewReader(text))
		if err == nil {
			_, err = Check(h, testTimeout)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: expected an error containing %q, got %v", text, want, err)
		}
	}
}

// The command writes porcupine's visualization for a failing history and exits 1.
func TestCommandExitsOneAndWritesTheVisualization(t *testing.T) {
	html := filepath.Join(t.TempDir(), "lost.html")
	if code := run("testdata/bad_register_lost_write.jsonl", html, false, testTimeout); code != exitAnomaly {
		t.Fatalf("exit %d, expected %d", code, exitAnomaly)
	}
	data, err := os.ReadFile(html)
	if err != nil || !strings.Contains(string(data), "read(key 1)") {
		t.Fatalf("the visualization was not written with the history (%v)", err)
	}
	if code := run("testdata/ok_bank.json", "", false, testTimeout); code != exitOK {
		t.Fatalf("exit %d for a linearizable history", code)
	}
	if code := run("testdata/no-such-file", "", false, testTimeout); code != exitBadInput {
		t.Fatalf("exit %d for a missing file", code)
	}
}
