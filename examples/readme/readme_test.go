package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReadmeExampleRuns runs the README's example on a fresh embedded
// store: the child reads the text, the signal approves it.
func TestReadmeExampleRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, filepath.Join(t.TempDir(), "readme.db"), &out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "approved: TOTAL 42 EUR\n"; got != want {
		t.Fatalf("printed %q, want %q", got, want)
	}
}

// TestReadmeShowsThisCode holds the README's Go example to this file: every
// line of the block, but the "// ..." elisions, is a line of main.go, in
// the same order.
func TestReadmeShowsThisCode(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- example: examples/readme/main.go -->\n```go\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no Go block marked <!-- example: examples/readme/main.go -->")
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	at := 0
	for _, want := range strings.Split(strings.TrimRight(string(m[1]), "\n"), "\n") {
		if strings.TrimSpace(want) == "// ..." || strings.TrimSpace(want) == "" {
			continue
		}
		for at < len(lines) && lines[at] != want {
			at++
		}
		if at == len(lines) {
			t.Fatalf("README line %q is not in main.go (in this order)", want)
		}
		at++
	}
}
