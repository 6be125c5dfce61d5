package activities_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/history"
)

// fuzzDeadline bounds compiling one policy and evaluating it on every
// input of policyFuzzInputs. The cost limit should keep both to
// milliseconds; the deadline is generous for a machine busy fuzzing.
const fuzzDeadline = 5 * time.Second

// policyFuzzInputs are the errors a fuzzed policy is evaluated on: empty,
// ordinary, and at the largest sizes a policy sees (which its cost
// estimate assumes) and beyond them (which evaluation cuts).
func policyFuzzInputs() []activities.PolicyInput {
	attrs := func(n, size int) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			k := fmt.Sprintf("%03d", i)
			m[k+strings.Repeat("k", size-len(k))] = strings.Repeat("v", size)
		}
		return m
	}
	return []activities.PolicyInput{
		{},
		{
			Error: activities.PolicyError{Message: "upstream returned 503", Kind: "http", Status: 503,
				Attrs: map[string]string{"provider": "openai", "model": "gpt"}},
			Attempt: 2, Elapsed: 90 * time.Second,
			Task: activities.PolicyTask{Type: "invoice.extract", Queue: "docs"}, Step: activities.PolicyStep{Name: "ocr"},
		},
		{
			// As large as a policy sees: the cost estimate's worst case.
			Error: activities.PolicyError{Message: strings.Repeat("a1.", 4096/3+1)[:4096], Kind: strings.Repeat("k", 256),
				Status: -1, Attrs: attrs(32, 256)},
			Attempt: 1 << 30, Elapsed: 1<<63 - 1,
			Task: activities.PolicyTask{Type: strings.Repeat("t", 256), Queue: strings.Repeat("q", 256)},
			Step: activities.PolicyStep{Name: strings.Repeat("s", 256)},
		},
		{
			// Larger than a policy sees: cut to the sizes above.
			Error: activities.PolicyError{Message: strings.Repeat("é", 1<<14) + "\xff", Kind: strings.Repeat("ü", 300),
				Status: 1 << 40, Attrs: attrs(64, 512)},
			Attempt: -1, Elapsed: -time.Hour,
			Task: activities.PolicyTask{Type: strings.Repeat("t", 1<<12), Queue: strings.Repeat("q", 1<<12)},
			Step: activities.PolicyStep{Name: strings.Repeat("s", 1<<14)},
		},
	}
}

// FuzzNewPolicy: NewPolicy returns a policy or an error marked
// ErrBadPolicy, never panics, and within a bounded time; a policy it
// accepts evaluates on every input of policyFuzzInputs to a class (an
// error counting as permanent), never over its cost limit (the estimate
// NewPolicy checks is an upper bound at these sizes), in bounded time.
func FuzzNewPolicy(f *testing.F) {
	for _, expr := range []string{
		// README and tests.
		`error.status == 429 || error.status == 529 || error.status >= 500 || error.kind == "timeout"`,
		`error.status >= 500 && elapsed < duration("1h")`,
		`error.kind == "bad_document" ? "permanent" : (error.message.contains("connection reset") ? "transient" : "permanent")`,
		"error.status == 429 || error.status >= 500",
		`error.kind == "rate_limited" ? "transient" : "permanent"`,
		`attempt < 3 && elapsed < duration("1m")`,
		`task.type == "doc.ocr" && step.name == "ocr" && task.queue == "gpu"`,
		`"provider" in error.attrs && error.attrs["provider"] == "openai"`,
		`error.message.lowerAscii().contains("timeout")`,
		`error.attrs["provider"] == "openai"`,
		`"transiant"`,
		`size(error.message) <= 4096 && error.message.startsWith("x")`,
		"false",
		`error.kind == "timeout"`,
		// Refused ones.
		"error.status == 429 ||",
		"error.sttus >= 500",
		"status >= 500",
		"error.status + 1",
		`error.status == "429"`,
		`error.attrs.all(k, error.attrs.all(v, error.message.matches(k + v) || error.message.contains(k + v)))`,
		"error.",
		"",
		// Near the cost limit, and dynamic results.
		`error.attrs.exists(k, error.message.contains(k))`,
		`error.message.matches("^(a|b)*c$") ? "transient" : error.kind`,
		`error.message.split(".").exists(p, p == "1")`,
		`error.attrs.map(k, error.attrs[k] + k).exists(x, x.endsWith("v"))`,
		`dyn(error.status) == 503`,
		`[error.message, error.kind].exists(s, s.replace("a", "bb").size() > 5000)`,
		`error.message.substring(1, 2) == "1"`,
		`int(error.message) > 0`,
		`duration(error.kind) > duration("1s")`,
		`elapsed + duration("290000h") > duration("1s")`,
		`attempt * attempt > 0`,
		`error.status / (attempt - attempt) == 0`,
		`strings.quote(error.message).size() > 0`,
		`"%s %d".format([error.kind, error.status]) == "x 1"`,
		`[1,2,3].map(x, [1,2,3].map(y, [1,2,3].map(z, x+y+z))).size() > 0`,
		`(((((((((((((((((((((((((((((((true)))))))))))))))))))))))))))))))`,
		// Cheap at the sizes the estimate assumes for step.name (256), over
		// the limit with the 16 KiB step name of the last input unless
		// evaluation cuts it to that size.
		`step.name.contains(error.kind)`,
		`task.type.matches(task.queue) || step.name.endsWith(error.kind)`,
	} {
		f.Add(expr)
	}
	inputs := policyFuzzInputs()

	f.Fuzz(func(t *testing.T, expr string) {
		done := make(chan struct{})
		var failure string
		go func() {
			defer close(done)
			failure = checkPolicy(expr, inputs)
		}()
		select {
		case <-done:
		case <-time.After(fuzzDeadline):
			t.Fatalf("compiling and evaluating %q took over %s", expr, fuzzDeadline)
		}
		if failure != "" {
			t.Fatalf("%q: %s", expr, failure)
		}
	})
}

// checkPolicy compiles expr and evaluates it on inputs, returning what is
// wrong, if anything. It runs in its own goroutine: it reports rather
// than failing the test, and a panic fails the fuzz input by itself.
func checkPolicy(expr string, inputs []activities.PolicyInput) string {
	p, err := activities.NewPolicy("fuzz", expr)
	if err != nil {
		if p != nil {
			return "NewPolicy returned a policy and an error"
		}
		if !errors.Is(err, activities.ErrBadPolicy) {
			return fmt.Sprintf("error not marked ErrBadPolicy: %v", err)
		}
		if !strings.Contains(err.Error(), `policy "fuzz"`) {
			return fmt.Sprintf("error does not name the policy: %v", err)
		}
		return ""
	}
	if p.Expression() != expr || p.Name() != "fuzz" {
		return fmt.Sprintf("policy says it is %q: %q", p.Name(), p.Expression())
	}
	for i, in := range inputs {
		class, err := p.Classify(in)
		switch {
		case class != history.Transient && class != history.Permanent:
			return fmt.Sprintf("input %d: class %q", i, class)
		case err != nil && class != history.Permanent:
			return fmt.Sprintf("input %d: an evaluation error (%v) classified as %s", i, err, class)
		case err != nil && strings.Contains(err.Error(), "cost limit"):
			return fmt.Sprintf("input %d: accepted with a cost estimate under the limit, but evaluation ran over it: %v", i, err)
		}
	}
	return ""
}
