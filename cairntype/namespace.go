package cairntype

import (
	"strings"
	"time"
	"unicode"

	"github.com/cockroachdb/errors"
)

// NamespaceConfig is a namespace's retention settings. Zero durations
// take the defaults of the process that runs retention (sdk's
// WorkerConfig.DefaultRetention and DefaultKeyRetention).
type NamespaceConfig struct {
	Name string
	// Retention is how long after it finished a task is removed, with its
	// whole log.
	Retention time.Duration
	// KeyRetention is how long after the removal a removed task's
	// idempotency key stays taken.
	KeyRetention time.Duration
	// OldestFinished is when the namespace's oldest finished task still
	// kept finished; zero when it keeps none. A listing reads it (how far
	// behind retention is); writing the settings ignores it.
	OldestFinished time.Time
	// TypeRetention gives task types of the namespace a retention of
	// their own, in place of Retention for their tasks (a type listed
	// with a retention keeps it even when the namespace has none).
	TypeRetention map[string]time.Duration
	// Archive is where retention writes the namespace's histories before
	// it removes them (file:///dir, s3://bucket/prefix); empty: the
	// default of the process that runs retention, or none.
	Archive string
	// StreamTTL is how long the namespace keeps its tasks' stream entries
	// (docs/streams.md) after they were written; 0: as long as their
	// tasks.
	StreamTTL time.Duration
	// Cell is the cell whose database holds this namespace's row, in a
	// listing over cells (sdk.Client.Namespaces with a placement map);
	// empty without cells. Writing the settings ignores it.
	Cell string
}

// Validate checks the settings before a store writes them.
func (c NamespaceConfig) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("namespace name is empty")
	case c.Retention < 0:
		return errors.Newf("namespace %s: retention %s is negative (0 takes the default)", c.Name, c.Retention)
	case c.KeyRetention < 0:
		return errors.Newf("namespace %s: key retention %s is negative (0 takes the default)", c.Name, c.KeyRetention)
	case len(c.Archive) > 2000 || strings.ContainsFunc(c.Archive, unicode.IsControl):
		return errors.Newf("namespace %s: the archive location must be at most 2000 characters, without control characters", c.Name)
	case c.StreamTTL < 0:
		return errors.Newf("namespace %s: stream TTL %s is negative (0 keeps stream entries as long as their tasks)", c.Name, c.StreamTTL)
	case c.Retention > 0 && c.Retention < time.Millisecond, c.KeyRetention > 0 && c.KeyRetention < time.Millisecond,
		c.StreamTTL > 0 && c.StreamTTL < time.Millisecond:
		return errors.Newf("namespace %s: retention is kept in milliseconds; use at least 1ms", c.Name)
	case len(c.TypeRetention) > MaxTypeRetentions:
		return errors.Newf("namespace %s: %d task types with a retention of their own, at most %d", c.Name, len(c.TypeRetention), MaxTypeRetentions)
	}
	for typ, d := range c.TypeRetention {
		switch {
		case typ == "" || len(typ) > 200 || strings.ContainsFunc(typ, unicode.IsControl):
			return errors.Newf("namespace %s: task type %q of a type retention must be 1-200 characters without control characters", c.Name, typ)
		case d < time.Millisecond:
			return errors.Newf("namespace %s: retention %s of task type %s is not at least 1ms", c.Name, d, typ)
		}
	}
	return nil
}

// MaxTypeRetentions bounds the task types of a namespace with a retention
// of their own: each pass compares every removable task's type with them.
const MaxTypeRetentions = 100
