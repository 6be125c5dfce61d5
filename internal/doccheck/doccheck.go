// Package doccheck holds documentation to the code it shows: a Go block
// in a Markdown page, marked with the file it comes from, must be lines
// of that file in order. Tests of the examples use it, so a page cannot
// drift from code that compiles and runs.
package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/cockroachdb/errors"
)

// blockPattern finds a Go block marked <!-- example: PATH -->.
var blockPattern = regexp.MustCompile("(?s)<!-- example: ([^ ]+) -->\n```go\n(.*?)```")

// Blocks returns the marked Go blocks of the page at path, by the file
// each names (relative to root), in page order; a file named twice has
// its blocks joined in order.
func Blocks(page string) (map[string][]string, error) {
	text, err := os.ReadFile(page)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, m := range blockPattern.FindAllStringSubmatch(string(text), -1) {
		out[m[1]] = append(out[m[1]], m[2])
	}
	if len(out) == 0 {
		return nil, errors.Newf("%s has no Go block marked <!-- example: PATH -->", page)
	}
	return out, nil
}

// Check holds every marked block of page to its file under root: each
// line of a block, but blank lines and "// ..." elisions, is a line of
// the file, in the same order (the blocks of one file follow each other
// in it too).
func Check(page, root string) error {
	blocks, err := Blocks(page)
	if err != nil {
		return err
	}
	for file, parts := range blocks {
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return errors.Wrapf(err, "%s shows %s", page, file)
		}
		if err := inOrder(strings.Split(string(src), "\n"), parts); err != nil {
			return errors.Wrapf(err, "%s shows %s", page, file)
		}
	}
	return nil
}

func inOrder(lines, parts []string) error {
	at := 0
	for _, part := range parts {
		for _, want := range strings.Split(strings.TrimRight(part, "\n"), "\n") {
			if t := strings.TrimSpace(want); t == "" || t == "// ..." {
				continue
			}
			for at < len(lines) && lines[at] != want {
				at++
			}
			if at == len(lines) {
				return errors.Newf("line %q is not in the file (in this order)", want)
			}
			at++
		}
	}
	return nil
}
