// Package celenv makes the CEL environments cairn shares between goroutines
// (retry policies, task and event filters), and bounds what their programs
// may spend: [Strings] prices format by its output, [ProgramOptions] sets a
// cost limit and interrupt checks, [Eval] evaluates under a context. It
// imports nothing of cairn.
//
// cel-go's checker fills its symbol catalog lazily, under a sync.Once, the
// first time it reports an undeclared reference, but it copies the field
// without that Once when it enters a comprehension's scope. Two compiles on
// one environment, one with an unknown name and one with a macro such as
// all() or exists(), therefore race (cel-go v0.33.2). [New] fills the
// catalog before the environment is shared, so the field is only read
// afterwards.
package celenv

import (
	"github.com/cockroachdb/errors"

	"cel.dev/cel-go/cel"
)

// primer names nothing declared, so checking it makes the checker load its
// catalog to suggest a name.
const primer = "cairn_celenv_primer_undeclared"

// New is cel.NewEnv, with the checker's lazy state filled before the
// environment is returned. Publish the result through a sync.Once (or
// sync.OnceValues) so other goroutines see that state.
func New(opts ...cel.EnvOption) (*cel.Env, error) {
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, err
	}
	if _, iss := env.Compile(primer); iss.Err() == nil {
		return nil, errors.Newf("celenv: %q compiled; the environment declares the primer name", primer)
	}
	return env, nil
}
