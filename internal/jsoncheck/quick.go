package jsoncheck

import "bytes"

// quickValid reports whether text is certainly one JSON value that Check
// and CheckMarshaled accept, reading it once without allocating: strings
// of printable ASCII without escapes, numbers of a few digits, objects of
// a few members with distinct names, a few levels deep. Most inputs are
// such (a start's input, a step's output), and the decoder Check falls
// back to costs some twenty allocations for a small object (a sixth of
// StartMany's CPU). false says nothing about text: the decoder then says
// what is wrong, if anything.
func quickValid(text []byte) bool {
	q := quickScan{text: text}
	q.space()
	if !q.value(0) {
		return false
	}
	q.space()
	return q.i == len(q.text)
}

// The bounds of what quickValid reads; past them it leaves the text to
// the decoder. An exponent of three digits is within MaxExponent.
const (
	quickDepth     = 16
	quickMembers   = 16
	quickDigits    = 40
	quickExpDigits = 3
)

type quickScan struct {
	text []byte
	i    int
}

func (q *quickScan) space() {
	for q.i < len(q.text) {
		switch q.text[q.i] {
		case ' ', '\t', '\n', '\r':
			q.i++
		default:
			return
		}
	}
}

// at reports whether the next byte is c.
func (q *quickScan) at(c byte) bool { return q.i < len(q.text) && q.text[q.i] == c }

func (q *quickScan) value(depth int) bool {
	if q.i >= len(q.text) || depth >= quickDepth {
		return false
	}
	switch c := q.text[q.i]; {
	case c == '{':
		return q.object(depth)
	case c == '[':
		return q.array(depth)
	case c == '"':
		_, ok := q.str()
		return ok
	case c == '-' || c >= '0' && c <= '9':
		return q.number()
	case c == 't':
		return q.word("true")
	case c == 'f':
		return q.word("false")
	case c == 'n':
		return q.word("null")
	}
	return false
}

func (q *quickScan) word(w string) bool {
	if len(q.text)-q.i < len(w) || string(q.text[q.i:q.i+len(w)]) != w {
		return false
	}
	q.i += len(w)
	return true
}

// str reads a string of printable ASCII without escapes and returns what
// is between its quotes.
func (q *quickScan) str() ([]byte, bool) {
	start := q.i + 1
	for j := start; j < len(q.text); j++ {
		switch c := q.text[j]; {
		case c == '"':
			q.i = j + 1
			return q.text[start:j], true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return nil, false
		}
	}
	return nil, false
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? of at most
// quickDigits digits before the exponent and quickExpDigits in it.
func (q *quickScan) number() bool {
	if q.at('-') {
		q.i++
	}
	var digits int
	switch {
	case q.at('0'):
		q.i++
		digits = 1
	case q.i < len(q.text) && q.text[q.i] >= '1' && q.text[q.i] <= '9':
		digits = q.digits()
	default:
		return false
	}
	if q.at('.') {
		q.i++
		n := q.digits()
		if n == 0 {
			return false
		}
		digits += n
	}
	if q.at('e') || q.at('E') {
		q.i++
		if q.at('+') || q.at('-') {
			q.i++
		}
		if n := q.digits(); n == 0 || n > quickExpDigits {
			return false
		}
	}
	return digits <= quickDigits
}

// digits reads a run of decimal digits and returns its length.
func (q *quickScan) digits() int {
	start := q.i
	for q.i < len(q.text) && q.text[q.i] >= '0' && q.text[q.i] <= '9' {
		q.i++
	}
	return q.i - start
}

func (q *quickScan) array(depth int) bool {
	q.i++ // [
	q.space()
	if q.at(']') {
		q.i++
		return true
	}
	for {
		q.space()
		if !q.value(depth + 1) {
			return false
		}
		if more, ok := q.more(']'); !ok || !more {
			return ok
		}
	}
}

// more reads what follows a member or element: a comma (more to come, true)
// or closing (the end, false); ok is false for anything else.
func (q *quickScan) more(closing byte) (more, ok bool) {
	q.space()
	switch {
	case q.at(','):
		q.i++
		return true, true
	case q.at(closing):
		q.i++
		return false, true
	}
	return false, false
}

func (q *quickScan) object(depth int) bool {
	q.i++ // {
	q.space()
	if q.at('}') {
		q.i++
		return true
	}
	var names [quickMembers][]byte
	n := 0
	for {
		q.space()
		if !q.at('"') || n == len(names) {
			return false
		}
		name, ok := q.str()
		if !ok {
			return false
		}
		for _, seen := range names[:n] {
			if bytes.Equal(seen, name) {
				return false // named twice: the decoder's walk says so
			}
		}
		names[n] = name
		n++
		q.space()
		if !q.at(':') {
			return false
		}
		q.i++
		q.space()
		if !q.value(depth + 1) {
			return false
		}
		if more, ok := q.more('}'); !ok || !more {
			return ok
		}
	}
}
