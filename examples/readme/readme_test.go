package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnflow/cairn/internal/doccheck"
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

// TestReadmeShowsThisCode holds the README's Go example to main.go.
func TestReadmeShowsThisCode(t *testing.T) {
	if err := doccheck.Check("../../README.md", "../.."); err != nil {
		t.Fatal(err)
	}
}
