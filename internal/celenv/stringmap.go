package celenv

import (
	"reflect"
	"sort"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// StringMap is a map(string, string) whose lookup of a missing key is ""
// rather than CEL's "no such key" error, as a Go map's is. Labels and error
// attributes are sparse: most tasks lack any one label, and a filter such
// as `task.labels["src"] == "curl"` must be false on them, not fail.
// Presence stays answerable: `has(m.key)` and `"key" in m` are false for a
// missing key, so `has(task.labels.src)` tells a missing label from an
// empty one.
//
// It is a struct field's type for ext.NativeTypes (whose checker sees its
// kind, map(string, string)); the field getter hands the value itself to
// the interpreter, which indexes it through [traits.Indexer] and tests
// presence through [traits.FieldTester]. It deliberately has no Find
// method: a value with one is a traits.Mapper, which the interpreter
// indexes with Find and fails on a missing key.
type StringMap map[string]string

var (
	_ ref.Val            = StringMap(nil)
	_ traits.Indexer     = StringMap(nil)
	_ traits.FieldTester = StringMap(nil)
	_ traits.Container   = StringMap(nil)
	_ traits.Iterable    = StringMap(nil)
	_ traits.Sizer       = StringMap(nil)
)

// stringMapType is the CEL type the value reports: a map, so type(m) ==
// map and the map overloads (size, in, comprehensions) apply.
var stringMapType = types.NewMapType(types.StringType, types.StringType)

// cel returns the map as cel-go's own string map, for the operations
// where a missing key needs no leniency (equality, conversion).
func (m StringMap) cel() ref.Val { return types.NewStringStringMap(types.DefaultTypeAdapter, m) }

// ConvertToNative converts to a Go value as cel-go's string map does.
func (m StringMap) ConvertToNative(typeDesc reflect.Type) (any, error) {
	if typeDesc == reflect.TypeOf(m) {
		return m, nil
	}
	return m.cel().ConvertToNative(typeDesc)
}

// ConvertToType converts to a CEL type as cel-go's string map does.
func (m StringMap) ConvertToType(typeVal ref.Type) ref.Val { return m.cel().ConvertToType(typeVal) }

// Equal compares by keys and values, as CEL compares maps.
func (m StringMap) Equal(other ref.Val) ref.Val {
	if o, ok := other.(StringMap); ok {
		other = o.cel()
	}
	return m.cel().Equal(other)
}

// Type is map(string, string).
func (m StringMap) Type() ref.Type { return stringMapType }

// Value is the Go map.
func (m StringMap) Value() any { return map[string]string(m) }

// Get returns the key's value, "" when the key is missing.
func (m StringMap) Get(key ref.Val) ref.Val {
	k, ok := key.(types.String)
	if !ok {
		return types.ValOrErr(key, "no such overload: map(string, string)[%s]", key.Type().TypeName())
	}
	return types.String(m[string(k)])
}

// IsSet reports whether the key is present: has(m.key).
func (m StringMap) IsSet(key ref.Val) ref.Val { return m.Contains(key) }

// Contains reports whether the key is present: "key" in m.
func (m StringMap) Contains(key ref.Val) ref.Val {
	k, ok := key.(types.String)
	if !ok {
		return types.False
	}
	_, found := m[string(k)]
	return types.Bool(found)
}

// Size is the number of keys.
func (m StringMap) Size() ref.Val { return types.Int(len(m)) }

// Iterator walks the keys in sorted order, so a comprehension's result
// (say, the first key that matches) does not depend on Go's map order.
func (m StringMap) Iterator() traits.Iterator {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return types.NewStringList(types.DefaultTypeAdapter, keys).Iterator()
}
