package celenv_test

import (
	"sync"
	"testing"

	"cel.dev/cel-go/cel"

	"github.com/cairnflow/cairn/internal/celenv"
)

// TestConcurrentCompilesDoNotRace compiles, on one shared environment, an
// expression with an unknown name (which makes the checker load its
// catalog) beside one with a comprehension (which copies the catalog
// field). Under -race it fails with cel.NewEnv in place of celenv.New.
func TestConcurrentCompilesDoNotRace(t *testing.T) {
	env, err := celenv.New(cel.Variable("xs", cel.ListType(cel.IntType)))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, iss := env.Compile("xs.all(x, x > 0 && unknown_name)"); iss.Err() == nil {
				t.Error("an unknown name compiled")
			}
		})
		wg.Go(func() {
			if _, iss := env.Compile("xs.exists(x, x > 1)"); iss.Err() != nil {
				t.Errorf("a valid comprehension: %v", iss.Err())
			}
		})
	}
	wg.Wait()
}

func TestNewRefusesAnEnvironmentDeclaringThePrimer(t *testing.T) {
	_, err := celenv.New(cel.Variable("cairn_celenv_primer_undeclared", cel.IntType))
	if err == nil {
		t.Fatal("want an error when the primer name is declared")
	}
}
