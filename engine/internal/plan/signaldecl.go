package plan

import (
	"bytes"
	"encoding/json"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/jsoncheck"
)

// SignalDeclarations encodes the signals a task type declares
// ([store.TaskType]'s Signals) for the task_types row's signals column:
// nil (NULL) when it declares none, else a JSON object of each name's
// schema. Both drivers refuse alike what one of them could not keep: an
// empty name, a schema that is not a JSON object or boolean, or JSON
// PostgreSQL's jsonb refuses (jsoncheck, and the escape \u0000).
func SignalDeclarations(declared map[string]json.RawMessage) (*string, error) {
	if declared == nil {
		return nil, nil
	}
	for name, schema := range declared {
		if name == "" {
			return nil, errors.New("task type signals: a signal without a name")
		}
		t := bytes.TrimSpace(schema)
		if len(t) == 0 || (t[0] != '{' && !bytes.Equal(t, []byte("true")) && !bytes.Equal(t, []byte("false"))) {
			return nil, errors.Newf("task type signal %q: its schema is not a JSON object or boolean", name)
		}
		if err := jsoncheck.Check(t, "schema"); err != nil {
			return nil, errors.Wrapf(err, "task type signal %q", name)
		}
		if bytes.Contains(t, []byte(`\u0000`)) {
			return nil, errors.Newf("task type signal %q: its schema holds \\u0000, which PostgreSQL cannot store", name)
		}
	}
	b, err := json.Marshal(declared)
	if err != nil {
		return nil, errors.Wrap(err, "task type signals")
	}
	s := string(b)
	return &s, nil
}

// ReadSignalDeclarations decodes a task_types row's signals column: nil
// for NULL.
func ReadSignalDeclarations(column []byte) (map[string]json.RawMessage, error) {
	if column == nil {
		return nil, nil
	}
	declared := map[string]json.RawMessage{}
	if err := json.Unmarshal(column, &declared); err != nil {
		return nil, errors.Wrap(err, "decode declared signals")
	}
	return declared, nil
}
