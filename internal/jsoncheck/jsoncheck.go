// Package jsoncheck holds the rules cairn applies to JSON text it accepts
// (a task's input, an HTTP request body) beyond what encoding/json checks,
// so that the PostgreSQL store and the embedded one accept and refuse the
// same text and read back the same values; and the canonical form a
// start's input is compared in when an idempotency key is reused.
//
// encoding/json accepts invalid UTF-8 and lone surrogate escapes in strings
// and turns them into U+FFFD when it decodes, lets the last of two members
// of one name win, and reads numbers of any size. PostgreSQL's jsonb
// refuses the first two and numbers outside its numeric range, while the
// embedded store keeps the text as given. [Check] refuses all of them.
//
// It imports nothing of cairn.
package jsoncheck

import (
	"bytes"
	"encoding/json"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/internal/errmark"
)

// Bounds on numbers: PostgreSQL's numeric holds at most 131072 digits
// before the point and 16383 after it; these stay well inside.
const (
	// MaxNumberDigits is the most digits a number may be written with.
	MaxNumberDigits = 1000
	// MaxExponent bounds the magnitude of a number's exponent.
	MaxExponent = 1000
)

// Error says what is wrong with a JSON text and where.
type Error struct {
	// Path names the member or element: "input.id", "items[2]",
	// `labels["a b"]`; the root given to [Check] when the value itself is
	// wrong ("" for a request body).
	Path string
	// Reason says what is wrong, e.g. "is not valid UTF-8".
	Reason string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return "the value " + e.Reason
	}
	return e.Path + " " + e.Reason
}

// ErrSyntax is returned (marked) by [Check] and [Canonical] for text that
// is not one JSON value.
var ErrSyntax = errors.New("not one JSON value")

// Check refuses JSON text that is valid to encoding/json but that cairn does
// not accept: a string (member names too) holding invalid UTF-8 or a lone
// surrogate escape (\ud800 without its pair), an object naming a member
// twice, a number of more than [MaxNumberDigits] digits or an exponent
// beyond ±[MaxExponent]. The error is an *[Error] whose Path starts with
// root ("input", or "" for a request body's top-level fields). Text that is
// not one JSON value gives an error marked [ErrSyntax].
func Check(text []byte, root string) error {
	return check(text, root, false)
}

// CheckMarshaled is [Check] for text json.Marshal wrote from a Go value. It
// also refuses the escape \ufffd, which json.Marshal writes in place of
// invalid UTF-8 in a Go string (it writes a real U+FFFD as itself), so a
// value whose strings are not UTF-8 is refused rather than changed.
func CheckMarshaled(text []byte, root string) error {
	return check(text, root, true)
}

func check(text []byte, root string, marshaled bool) error {
	if quickValid(text) {
		return nil
	}
	return walk(text, root, marshaled)
}

// walk checks text token by token with encoding/json's decoder, which
// says what is wrong and where.
func walk(text []byte, root string, marshaled bool) error {
	w := walker{dec: json.NewDecoder(bytes.NewReader(text)), text: text, marshaled: marshaled}
	w.dec.UseNumber()
	if err := w.value(root, nil); err != nil {
		return err
	}
	if _, err := w.dec.Token(); err != io.EOF {
		return errmark.Mark(errors.New("text after the JSON value"), ErrSyntax)
	}
	return nil
}

// Canonical returns text in a canonical form: two texts that hold the same
// JSON value (the same strings, numbers of equal value however written,
// objects with the same members in any order) have byte-identical
// canonical forms, whoever wrote them (a client, PostgreSQL's jsonb, the
// embedded store). Empty text is null. An object naming a member twice
// keeps the last, as jsonb does. The form is itself JSON: compact,
// members sorted by name, numbers as digits and an exponent ("15e-1" for
// 1.50).
func Canonical(text []byte) ([]byte, error) {
	if len(bytes.TrimSpace(text)) == 0 {
		return []byte("null"), nil
	}
	w := walker{dec: json.NewDecoder(bytes.NewReader(text)), text: text}
	w.dec.UseNumber()
	var out bytes.Buffer
	if err := w.value("", &out); err != nil {
		return nil, err
	}
	if _, err := w.dec.Token(); err != io.EOF {
		return nil, errmark.Mark(errors.New("text after the JSON value"), ErrSyntax)
	}
	return out.Bytes(), nil
}

// Equal reports whether a and b hold the same JSON value: byte-identical
// canonical forms. Text that is not JSON equals only the same bytes.
func Equal(a, b []byte) bool {
	ca, errA := Canonical(a)
	cb, errB := Canonical(b)
	if errA != nil || errB != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca, cb)
}

// walker reads one JSON text token by token, checking each value and, when
// out is set, writing its canonical form.
type walker struct {
	dec       *json.Decoder
	text      []byte
	marshaled bool // json.Marshal wrote text: \ufffd stands for invalid UTF-8
}

// value reads the value at path. With out nil it checks (Check); with out
// set it writes the canonical form (Canonical), checking nothing beyond
// syntax and number form.
func (w *walker) value(path string, out *bytes.Buffer) error {
	start := w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err != nil {
		return errmark.Mark(errors.Wrap(err, "read JSON"), ErrSyntax)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return w.object(path, out)
		case '[':
			return w.array(path, out)
		}
		return errmark.Mark(errors.Newf("unexpected %q", rune(t)), ErrSyntax)
	case string:
		if out != nil {
			writeString(out, t)
			return nil
		}
		if reason := stringProblem(w.literal(start), w.marshaled); reason != "" {
			return &Error{Path: path, Reason: reason}
		}
	case json.Number:
		digits, exp, ok := number(string(t))
		if out != nil {
			if !ok { // out of bounds: not canonical, but the same text compares equal
				out.WriteString(string(t))
				return nil
			}
			out.WriteString(canonicalNumber(string(t), digits, exp))
			return nil
		}
		if !ok {
			return &Error{Path: path, Reason: "is a number of more than " + strconv.Itoa(MaxNumberDigits) +
				" digits or with an exponent beyond ±" + strconv.Itoa(MaxExponent)}
		}
	case bool:
		if out != nil {
			out.WriteString(strconv.FormatBool(t))
		}
	case nil:
		if out != nil {
			out.WriteString("null")
		}
	}
	return nil
}

func (w *walker) object(path string, out *bytes.Buffer) error {
	type member struct {
		name  string
		value []byte
	}
	var members []member
	seen := map[string]bool{}
	for w.dec.More() {
		start := w.dec.InputOffset()
		tok, err := w.dec.Token()
		if err != nil {
			return errmark.Mark(errors.Wrap(err, "read JSON"), ErrSyntax)
		}
		name, ok := tok.(string)
		if !ok {
			return errmark.Mark(errors.New("an object member has no name"), ErrSyntax)
		}
		lit := w.literal(start)
		if out == nil {
			if reason := stringProblem(lit, w.marshaled); reason != "" {
				return &Error{Path: memberPath(path, rawName(lit)), Reason: "names a member that " + reason}
			}
			if seen[name] {
				return &Error{Path: memberPath(path, name), Reason: "is named twice"}
			}
			seen[name] = true
			if err := w.value(memberPath(path, name), nil); err != nil {
				return err
			}
			continue
		}
		var v bytes.Buffer
		if err := w.value("", &v); err != nil {
			return err
		}
		if seen[name] { // the last wins, as in jsonb
			for i := range members {
				if members[i].name == name {
					members = append(members[:i], members[i+1:]...)
					break
				}
			}
		}
		seen[name] = true
		members = append(members, member{name, v.Bytes()})
	}
	if _, err := w.dec.Token(); err != nil { // '}'
		return errmark.Mark(errors.Wrap(err, "read JSON"), ErrSyntax)
	}
	if out != nil {
		sort.Slice(members, func(i, j int) bool { return members[i].name < members[j].name })
		out.WriteByte('{')
		for i, m := range members {
			if i > 0 {
				out.WriteByte(',')
			}
			writeString(out, m.name)
			out.WriteByte(':')
			out.Write(m.value)
		}
		out.WriteByte('}')
	}
	return nil
}

func (w *walker) array(path string, out *bytes.Buffer) error {
	if out != nil {
		out.WriteByte('[')
	}
	for i := 0; w.dec.More(); i++ {
		if out != nil && i > 0 {
			out.WriteByte(',')
		}
		if err := w.value(path+"["+strconv.Itoa(i)+"]", out); err != nil {
			return err
		}
	}
	if _, err := w.dec.Token(); err != nil { // ']'
		return errmark.Mark(errors.Wrap(err, "read JSON"), ErrSyntax)
	}
	if out != nil {
		out.WriteByte(']')
	}
	return nil
}

// literal returns the string literal the token read since start holds,
// quotes included: the decoder skips white space, ',' and ':' before it,
// none of which is a quote.
func (w *walker) literal(start int64) []byte {
	lit := w.text[start:w.dec.InputOffset()]
	if i := bytes.IndexByte(lit, '"'); i >= 0 {
		return lit[i:]
	}
	return lit
}

// stringProblem says what is wrong with a string literal (quotes included),
// or "" when nothing is. marshaled: the escape \ufffd marks invalid UTF-8.
func stringProblem(lit []byte, marshaled bool) string {
	if len(lit) < 2 {
		return ""
	}
	s := lit[1 : len(lit)-1]
	for i := 0; i < len(s); {
		switch b := s[i]; {
		case b == '\\':
			if i+1 < len(s) && s[i+1] == 'u' && i+6 <= len(s) {
				r := hex4(s[i+2 : i+6])
				switch {
				case r >= 0xD800 && r <= 0xDBFF:
					if i+12 <= len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
						if lo := hex4(s[i+8 : i+12]); lo >= 0xDC00 && lo <= 0xDFFF {
							i += 12
							continue
						}
					}
					return "holds a lone surrogate escape (\\u" + strings.ToLower(string(s[i+2:i+6])) + ")"
				case r >= 0xDC00 && r <= 0xDFFF:
					return "holds a lone surrogate escape (\\u" + strings.ToLower(string(s[i+2:i+6])) + ")"
				case r == utf8.RuneError && marshaled:
					return "is not valid UTF-8 (json.Marshal would replace it with U+FFFD)"
				}
				i += 6
				continue
			}
			i += 2
		case b < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				return "is not valid UTF-8 (byte " + strconv.Itoa(i) + " of the string)"
			}
			i += size
		}
	}
	return ""
}

// hex4 is the value of four hex digits (valid: the decoder read them).
func hex4(h []byte) rune {
	n, err := strconv.ParseUint(string(h), 16, 32)
	if err != nil {
		return -1
	}
	return rune(n)
}

// number splits a JSON number into its significant digits (no leading or
// trailing zeros; "" for zero) and the exponent that makes digits×10^exp
// its value, and says whether it is within bounds.
func number(n string) (digits string, exp int, ok bool) {
	n = strings.TrimPrefix(n, "-")
	mant, expText, hasExp := strings.Cut(strings.ToLower(n), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	if len(intPart)+len(frac) > MaxNumberDigits {
		return "", 0, false
	}
	if hasExp {
		expText = strings.TrimLeft(strings.TrimPrefix(expText, "+"), "0")
		neg := strings.HasPrefix(expText, "-")
		expText = strings.TrimLeft(strings.TrimPrefix(expText, "-"), "0")
		if len(expText) > 6 {
			return "", 0, false
		}
		if expText != "" {
			e, err := strconv.Atoi(expText)
			if err != nil || e > MaxExponent {
				return "", 0, false
			}
			exp = e
			if neg {
				exp = -e
			}
		}
	}
	all := intPart + frac
	exp -= len(frac)
	trimmed := strings.TrimRight(all, "0")
	exp += len(all) - len(trimmed)
	digits = strings.TrimLeft(trimmed, "0")
	if digits == "" {
		exp = 0
	}
	return digits, exp, true
}

// canonicalNumber writes a number from its parts: "0", or an optional
// minus, the digits, and "e" and the exponent when it is not 0.
func canonicalNumber(text, digits string, exp int) string {
	if digits == "" {
		return "0" // -0 too, as PostgreSQL's numeric has it
	}
	s := digits
	if strings.HasPrefix(text, "-") {
		s = "-" + s
	}
	if exp != 0 {
		s += "e" + strconv.Itoa(exp)
	}
	return s
}

// writeString writes s as a JSON string, one fixed way.
func writeString(out *bytes.Buffer, s string) {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // a string always encodes
	out.Truncate(out.Len() - 1) // Encode's newline
}

// rawName is a member name as written (invalid bytes shown as \xff), for
// an error about it.
func rawName(lit []byte) string {
	if len(lit) < 2 {
		return string(lit)
	}
	return string(lit[1 : len(lit)-1])
}

// memberPath is the path of member name of the object at path.
func memberPath(path, name string) string {
	if plainName(name) {
		if path == "" {
			return name
		}
		return path + "." + name
	}
	return path + "[" + strconv.Quote(name) + "]"
}

// plainName is a name a path shows unquoted.
func plainName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
