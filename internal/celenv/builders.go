package celenv

import (
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/functions"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/errmark"
)

// MaxStringBytes bounds the string one call of join, replace or format
// may make. cel-go charges these calls by the length of their result, but
// only once they have returned: one join of 400 references to a string
// of 800,000 characters allocated 320 MB before the cost limit stopped
// it (probe finding F7: a 2 KB filter from a read token took a server to
// 1.08 GB). Each call now works out its result's size first, and a
// result over the bound is not made: the evaluation stops with an error
// marked [ErrCostLimit]. A result that long would have gone over every
// cost limit cairn sets (1,000,000 for a filter, 100,000 for a policy)
// anyway, since building it costs one unit a character.
const MaxStringBytes = 1 << 20

// builders are the overloads of ext.Strings whose one call can make a
// string much longer than what it was given, with the most each result
// can be, worked out from the arguments before the call.
var builders = map[string]map[string]func(args []ref.Val) uint64{
	"join": {
		"list_join":        func(args []ref.Val) uint64 { return joinedSize(args[0], 0) },
		"list_join_string": func(args []ref.Val) uint64 { return joinedSize(args[0], stringLen(args[1])) },
	},
	"replace": {
		"string_replace_string_string":     func(args []ref.Val) uint64 { return replacedSize(args, -1) },
		"string_replace_string_string_int": func(args []ref.Val) uint64 { return replacedSize(args, intArg(args[3])) },
	},
	"format": {
		"string_format": formattedSize,
	},
}

// boundBuilders declares again, on e made with ext.Strings, the
// overloads of builders with the same signatures and a binding that
// refuses a result over MaxStringBytes before calling ext.Strings' own.
// cel-go allows an overload's binding to be redefined when its signature
// is the same.
func boundBuilders(e *cel.Env) (*cel.Env, error) {
	for name, sizes := range builders {
		fn, ok := e.Functions()[name]
		if !ok {
			return nil, errors.Newf("celenv: ext.Strings declares no %s", name)
		}
		bindings, err := fn.Bindings()
		if err != nil {
			return nil, errors.Wrapf(err, "celenv: the bindings of %s", name)
		}
		impl := map[string]*functions.Overload{}
		for _, b := range bindings {
			impl[b.Operator] = b
		}
		var overloads []cel.FunctionOpt
		for _, o := range fn.OverloadDecls() {
			size, ok := sizes[o.ID()]
			if !ok {
				continue
			}
			orig, ok := impl[o.ID()]
			if !ok {
				return nil, errors.Newf("celenv: no binding of %s", o.ID())
			}
			overloads = append(overloads, cel.MemberOverload(o.ID(), o.ArgTypes(), o.ResultType(),
				cel.FunctionBinding(bounded(o.ID(), size, orig))))
		}
		if len(overloads) != len(sizes) {
			return nil, errors.Newf("celenv: ext.Strings' %s has %d of the %d overloads bounded here", name, len(overloads), len(sizes))
		}
		var err2 error
		if e, err2 = cel.Function(name, overloads...)(e); err2 != nil {
			return nil, errors.Wrapf(err2, "celenv: bound %s", name)
		}
	}
	return e, nil
}

// bounded calls orig, unless size says its result would be over
// MaxStringBytes.
func bounded(id string, size func([]ref.Val) uint64, orig *functions.Overload) functions.FunctionOp {
	return func(args ...ref.Val) ref.Val {
		for _, a := range args {
			if types.IsUnknownOrError(a) {
				return a
			}
		}
		if n := size(args); n > MaxStringBytes {
			err := errors.Newf("%s would make a string of up to %d bytes, over the %d a call may make", id, n, MaxStringBytes)
			return types.WrapErr(errmark.Mark(err, ErrCostLimit))
		}
		switch {
		case orig.Function != nil:
			return orig.Function(args...)
		case len(args) == 1 && orig.Unary != nil:
			return orig.Unary(args[0])
		case len(args) == 2 && orig.Binary != nil:
			return orig.Binary(args[0], args[1])
		}
		return types.NewErr("celenv: no implementation of %s for %d arguments", id, len(args))
	}
}

// joinedSize is the length of list's strings joined with sep bytes
// between them.
func joinedSize(list ref.Val, sep uint64) uint64 {
	l, ok := list.(traits.Lister)
	if !ok {
		return 0 // the original reports the type error
	}
	var n, count uint64
	for it := l.Iterator(); it.HasNext() == types.True; {
		n = satAdd(n, stringLen(it.Next()))
		count++
	}
	if count > 1 {
		n = satAdd(n, satMul(count-1, sep))
	}
	return n
}

// replacedSize is the length of args[0] with up to limit (all when
// negative) of args[1] replaced by args[2].
func replacedSize(args []ref.Val, limit int64) uint64 {
	s, okS := args[0].(types.String)
	old, okO := args[1].(types.String)
	repl, okR := args[2].(types.String)
	if !okS || !okO || !okR {
		return 0
	}
	matches := uint64(strings.Count(string(s), string(old))) // "" matches before each rune and at the end
	if limit >= 0 && uint64(limit) < matches {
		matches = uint64(limit)
	}
	grow := uint64(0)
	if len(repl) > len(old) {
		grow = uint64(len(repl) - len(old))
	}
	return satAdd(uint64(len(s)), satMul(matches, grow))
}

// formattedSize bounds the result of args[0].format(args[1]): the format
// string and each argument printed (a clause prints one argument, twice
// its length at most: %x of a string).
func formattedSize(args []ref.Val) uint64 {
	n := stringLen(args[0])
	l, ok := args[1].(traits.Lister)
	if !ok {
		return n
	}
	for it := l.Iterator(); it.HasNext() == types.True; {
		n = satAdd(n, satMul(2, printedSize(it.Next(), 0)))
	}
	return n
}

// printedSize bounds what format prints of v: a string as it is (or
// twice, in hex), quoted and escaped (six bytes a byte at most) inside
// a list or map, a scalar at most formatArgMax bytes.
func printedSize(v ref.Val, depth int) uint64 {
	switch x := v.(type) {
	case types.String:
		if depth == 0 {
			return uint64(len(x))
		}
		return satAdd(satMul(6, uint64(len(x))), 2)
	case types.Bytes:
		return satAdd(satMul(6, uint64(len(x))), 3)
	case traits.Mapper:
		n := uint64(2)
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			n = satAdd(n, satAdd(satAdd(printedSize(k, depth+1), printedSize(x.Get(k), depth+1)), 4))
		}
		return n
	case traits.Lister:
		n := uint64(2)
		for it := x.Iterator(); it.HasNext() == types.True; {
			n = satAdd(n, satAdd(printedSize(it.Next(), depth+1), 2))
		}
		return n
	}
	return formatArgMax
}

func stringLen(v ref.Val) uint64 {
	if s, ok := v.(types.String); ok {
		return uint64(len(s))
	}
	return 0
}

func intArg(v ref.Val) int64 {
	if i, ok := v.(types.Int); ok {
		return int64(i)
	}
	return -1
}

func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > ^uint64(0)/a {
		return ^uint64(0)
	}
	return a * b
}
