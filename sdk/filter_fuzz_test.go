package sdk_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/history/historytest"
	"github.com/cairnflow/cairn/sdk"
)

// filterFuzzDeadline bounds compiling one filter and matching it against
// every sample. The cost limit keeps one match to a fraction of a second
// (a filter that runs into it takes about 0.2 s on a loaded machine); the
// deadline leaves room for a few dozen of those, on a machine busy fuzzing.
const filterFuzzDeadline = 10 * time.Second

// filterSeeds are real filter expressions (README, tests, CLI help) and
// some that stress the compiler: the seeds of both filter fuzz targets.
var filterSeeds = []string{
	// Task filters.
	`error.status == 401`,
	`task.type == "crm.sync" && error.status >= 500`,
	`error.status == 503 && task.type == "crm.sync"`,
	`error.status = 503`,
	"task.type == \"a\" &&\n error.stat == 503",
	`task.labels["tenant"] == "acme"`,
	`"tenant" in task.labels && task.labels.tenant.startsWith("a")`,
	`error.kind == "rate_limited" && task.finished_at > timestamp("2026-11-01T00:00:00Z")`,
	`task.type == "invoice.extract" && error.status == 503`,
	`task.finished_at == timestamp(0) || task.created_at < task.finished_at`,
	`error.attrs.exists(k, error.attrs[k].matches("^[a-z]+$")) && error.classified_by.startsWith("policy:")`,
	`task.id.size() == 36 && task.priority + task.attempt > task.version`,
	`error.message.split(" ").map(w, w.upperAscii()).exists(w, w == "HTTP")`,
	// Event filters.
	`event.type == "attempt_failed" && event.data.error.status == 429`,
	`event.type in ["task_dead_lettered", "task_failed"] && task.labels["team"] == "ap"`,
	`task.type == "invoice.extract" && event.type == "step_completed" && event.data.name == "ocr"`,
	`event.type == "task_dead_lettered" && task.type == "crm.sync"`,
	`event.type == "step_completed" && event.data.name == "ocr" && event.data.output.pages > 50`,
	`event.type == "cancel_requested" && event.data.reason == "user clicked stop"`,
	`event.type = "attempt_failed"`,
	"event.type == \"attempt_failed\" &&\n  event.dta.error.status == 429",
	`task.queue == "docs" && nope`,
	`event.seq + 1`,
	`event.type == 429`,
	`"attempt_failed" == event.type`,
	`event.type in ["task_failed", "attempt_failed", "task_failed"] && (task.type == "crm.sync" && task.queue == "q")`,
	`event.type in ["task_failed", "attempt_failed"] && event.type == "attempt_failed"`,
	`event.type == "attempt_failed" && event.type == "task_failed"`,
	`task.type == "a" && event.attempt > 1 && task.type == "b"`,
	`event.type in []`,
	`event.type == "attempt_failed" || task.type == "a"`,
	`!(event.type == "attempt_failed")`,
	`event.type == task.type`,
	`event.type in ["a", task.type]`,
	`event.data.name == "ocr" && task.namespace == "x"`,
	`has(event.data.error) && event.data.error.status >= 500`,
	`event.type == "attempt_failed" && event.data.next_run_at == null`,
	`event.at < timestamp("2026-01-02T03:04:10Z") && event.data.output.ok`,
	`[event][0].data.name == "reserve" && task.type == "send_invoice"`,
	`[1].all(event, event == 1) && event.type == "task_scheduled"`,
	`has(event.type) && event.type == "attempt_started" && event.data.lease_epoch == 1`,
	`task.queue == "default" && task.queue == "" && task.type == "send_invoice"`,
	`event.type == "task_scheduled" && event.data.input.invoice == 42 && event.data.labels.size() == 0`,
	// Neither: stress.
	``, `true`, `dyn(1)`, `null`, `1 / 0 == 1`,
	`[1,2,3,4,5,6,7,8].map(a, [1,2,3,4,5,6,7,8].map(b, [1,2,3,4,5,6,7,8].map(c, a*b*c))).size() > 0`,
	strings.Repeat("(", 40) + "true" + strings.Repeat(")", 40),
	strings.Repeat("!", 300) + "true",
}

// filterTasks are the tasks a fuzzed task filter is matched against.
func filterTasks() []*sdk.TaskInfo {
	finished := historytest.Base.Add(time.Hour)
	return []*sdk.TaskInfo{
		{ID: uuid.MustParse("0190a0b0-0000-7000-8000-000000000001"), Namespace: "default", Type: "crm.sync", TypeVersion: 1,
			Queue: "default", Status: history.StatusPending, CreatedAt: historytest.Base},
		{
			ID: uuid.MustParse("0190a0b0-0000-7000-8000-000000000002"), Namespace: "default", Type: "invoice.extract", TypeVersion: 3,
			Queue: "docs", Status: history.StatusDeadLettered, Priority: 5, Attempt: 4, MaxAttempts: 4, IdempotencyKey: "inv-42",
			LastError: &history.ErrorInfo{Class: history.Transient, Message: "HTTP 503 from upstream", Kind: "http", Status: 503,
				Attrs: map[string]string{"provider": "openai", "model": "gpt"}, Step: "ocr", Position: 1, ClassifiedBy: "policy:http"},
			CreatedAt: historytest.Base, FinishedAt: &finished, Labels: map[string]string{"tenant": "acme", "team": "ap"},
		},
		{
			ID: uuid.MustParse("0190a0b0-0000-7000-8000-000000000003"), Type: "", Status: history.StatusFailed, Priority: -7,
			LastError: &history.ErrorInfo{Message: strings.Repeat("ä\x00", 2000) + "\xff"},
			CreatedAt: time.Time{}, FinishedAt: &time.Time{}, Labels: map[string]string{"": ""},
		},
	}
}

// filterRecords are the audit records a fuzzed event filter is matched
// against: an event of each type the generated histories of a few seeds
// hold, with its payload decoded as the audit hands it out, and a few
// records made by hand with only their stored JSON (some not an object,
// or not JSON).
func filterRecords() []*sdk.AuditRecord {
	var out []*sdk.AuditRecord
	seen := map[history.Type]int{}
	task := func(i int) sdk.AuditTask {
		return sdk.AuditTask{ID: uuid.MustParse(fmt.Sprintf("0190a0b0-0000-7000-8000-%012d", i)), Namespace: "default",
			Type: []string{"send_invoice", "crm.sync", "invoice.extract"}[i%3], Version: 1, Queue: []string{"default", "docs"}[i%2],
			Status: history.StatusRunning, Labels: []map[string]string{nil, {"team": "ap"}}[i%2], FairnessKey: "tenant-1"}
	}
	for seed := range uint64(40) {
		for _, e := range historytest.FromSeed(seed, historytest.Opts{Complete: true}) {
			if seen[e.Type()] >= 1 {
				continue
			}
			seen[e.Type()]++
			data, err := history.Encode(e.Data)
			if err != nil {
				panic(err)
			}
			out = append(out, &sdk.AuditRecord{
				Event: sdk.AuditEvent{Type: e.Type(), Seq: e.Seq, At: e.At, Attempt: e.Attempt, Data: data, Payload: e.Data},
				Task:  task(len(out)),
			})
		}
	}
	for _, raw := range []string{
		`{"v":1,"name":"ocr","output":{"pages":51,"n":1.5,"big":1e400,"deep":[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]}}`,
		`{"v":1,"error":{"status":429,"attrs":{"a":"b"}}}`,
		`[1,2]`, `not json`, ``,
	} {
		out = append(out, &sdk.AuditRecord{
			Event: sdk.AuditEvent{Type: history.StepCompleted, Seq: 3, At: historytest.Base, Attempt: 1, Data: json.RawMessage(raw)},
			Task:  task(len(out)),
		})
	}
	return out
}

// FuzzCompileTaskFilter: CompileTaskFilter returns a filter or an error
// marked ErrBadFilter, never panics, in bounded time; a filter matches
// each sample task to a bool or returns an error, never panics, in
// bounded time.
func FuzzCompileTaskFilter(f *testing.F) {
	for _, expr := range filterSeeds {
		f.Add(expr)
	}
	tasks := filterTasks()
	f.Fuzz(func(t *testing.T, expr string) {
		withDeadline(t, expr, func() string {
			filter, err := sdk.CompileTaskFilter(expr)
			if msg := checkCompileError(expr, filter != nil, err); msg != "" || err != nil {
				return msg
			}
			if filter.String() != expr {
				return fmt.Sprintf("the filter says it is %q", filter.String())
			}
			for i, task := range tasks {
				ok, err := filter.Match(task)
				if err != nil && ok {
					return fmt.Sprintf("task %d: matched with an error: %v", i, err)
				}
				if overCost(err) {
					break // it will be on the others too: spare the time
				}
			}
			return ""
		})
	})
}

// FuzzCompileEventFilter: CompileEventFilter returns a filter or an error
// marked ErrBadFilter, never panics, in bounded time; a filter matches each
// sample record to a bool or returns an error, never panics, in bounded
// time; every record it matches passes its prefilter (which only
// narrows); and skipping the conversion of event.data for an expression
// that does not read it changes no answer.
func FuzzCompileEventFilter(f *testing.F) {
	for _, expr := range filterSeeds {
		f.Add(expr)
	}
	records := filterRecords()
	f.Fuzz(func(t *testing.T, expr string) {
		withDeadline(t, expr, func() string {
			filter, err := sdk.CompileEventFilter(expr)
			if msg := checkCompileError(expr, filter != nil, err); msg != "" || err != nil {
				return msg
			}
			if filter.String() != expr {
				return fmt.Sprintf("the filter says it is %q", filter.String())
			}
			pre := filter.Prefilter()
			// The same expression, made to read event.data: its payload is
			// then always converted.
			withData, wdErr := sdk.CompileEventFilter("[event.data].size() == 1 && (" + expr + "\n)")
			for i, r := range records {
				ok, err := filter.Match(r)
				if err != nil && ok {
					return fmt.Sprintf("record %d: matched with an error: %v", i, err)
				}
				if ok {
					if msg := checkPrefilter(pre, r); msg != "" {
						return fmt.Sprintf("record %d (%s, task type %q, queue %q) matches, but %s (prefilter %+v)",
							i, r.Event.Type, r.Task.Type, r.Task.Queue, msg, pre)
					}
				}
				if overCost(err) {
					break // it will be on the others too: spare the time
				}
				if wdErr != nil || r.Event.Payload == nil {
					continue
				}
				ok2, err2 := withData.Match(r)
				if (err == nil) != (err2 == nil) && !overCost(err) && !overCost(err2) {
					return fmt.Sprintf("record %d: with event.data converted: %v, %v; without: %v, %v", i, ok2, err2, ok, err)
				}
				if err == nil && err2 == nil && ok != ok2 {
					return fmt.Sprintf("record %d: with event.data converted: %v; without: %v", i, ok2, ok)
				}
			}
			return ""
		})
	})
}

func overCost(err error) bool { return err != nil && strings.Contains(err.Error(), "cost limit") }

// checkPrefilter says how r fails to pass p, if it does.
func checkPrefilter(p sdk.EventPrefilter, r *sdk.AuditRecord) string {
	switch {
	case p.MatchesNothing:
		return "the prefilter matches nothing"
	case p.EventTypes != nil && !slices.Contains(p.EventTypes, r.Event.Type):
		return "the prefilter excludes its event type"
	case p.TaskType != "" && p.TaskType != r.Task.Type:
		return "the prefilter excludes its task type"
	case p.Queue != "" && p.Queue != r.Task.Queue:
		return "the prefilter excludes its queue"
	}
	return ""
}

// checkCompileError says what is wrong with what a compile returned, if
// anything: a compile error is marked ErrBadFilter and, when it is a
// FilterSyntaxError, locates the problem inside the expression.
func checkCompileError(expr string, gotFilter bool, err error) string {
	if err == nil {
		if !gotFilter {
			return "no filter and no error"
		}
		return ""
	}
	if gotFilter {
		return fmt.Sprintf("a filter and an error: %v", err)
	}
	if !errors.Is(err, sdk.ErrBadFilter) {
		return fmt.Sprintf("error not marked ErrBadFilter: %v", err)
	}
	if err.Error() == "" {
		return "empty error message"
	}
	var syntax *sdk.FilterSyntaxError
	if !errors.As(err, &syntax) {
		return ""
	}
	lines := strings.Count(expr, "\n") + 1
	switch {
	case syntax.Expr != expr:
		return fmt.Sprintf("the syntax error names %q", syntax.Expr)
	case syntax.Message == "":
		return fmt.Sprintf("the syntax error has no message: %v", err)
	case syntax.Line < 0 || syntax.Line > lines || syntax.Column < 0 || (syntax.Line == 0) != (syntax.Column == 0):
		return fmt.Sprintf("the syntax error is at %d:%d, outside the %d line(s) of the expression: %v", syntax.Line, syntax.Column, lines, err)
	}
	return ""
}

// withDeadline runs check in a goroutine and fails t if it takes longer
// than filterFuzzDeadline or reports a problem.
func withDeadline(t *testing.T, expr string, check func() string) {
	t.Helper()
	done := make(chan string, 1)
	go func() { done <- check() }()
	select {
	case msg := <-done:
		if msg != "" {
			t.Fatalf("%q: %s", expr, msg)
		}
	case <-time.After(filterFuzzDeadline):
		t.Fatalf("compiling and matching %q took over %s", expr, filterFuzzDeadline)
	}
}
