// Package examplekit runs the Example functions of cairn's packages on the
// embedded store, so that "go test" runs them and checks their output: a
// fresh SQLite file in a temporary directory, a worker with the example's
// workflows, and a client. It is imported by _test.go files only.
//
// Outside an example, the same takes a few lines of your own (see the
// README's example, or docs/getting-started.md):
//
//	store, err := sqlitestore.Open(ctx, "cairn.db")
//	worker, err := sdk.NewWorker(sdk.WorkerConfig{Store: store})
//	sdk.Register(worker, process)
//	err = worker.Start(ctx)
//	client, err := sdk.NewClient(sdk.ClientConfig{Store: store})
package examplekit

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/sdk"
)

// Embedded opens a fresh embedded store, starts a worker on it with what
// register adds, and returns a client of it and a func that stops the
// worker and removes the store. It panics on an error: an example has no
// testing.T to fail.
func Embedded(register func(*sdk.Worker)) (*sdk.Client, func()) {
	env, stop := Start(register)
	return env.Client, stop
}

// Env is what [Start] runs: the store, and a client of it.
type Env struct {
	Store  *sqlitestore.Store
	Client *sdk.Client
}

// Start is [Embedded], returning the store too (for a server over it).
func Start(register func(*sdk.Worker)) (*Env, func()) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "cairn-example-")
	check(err)
	store, err := sqlitestore.Open(ctx, filepath.Join(dir, "cairn.db"))
	check(err)
	worker, err := sdk.NewWorker(sdk.WorkerConfig{
		Store: store, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), // keep the examples' output their own
	})
	check(err)
	if register != nil {
		register(worker)
	}
	check(worker.Start(ctx))
	client, err := sdk.NewClient(sdk.ClientConfig{Store: store})
	check(err)
	return &Env{Store: store, Client: client}, func() {
		client.Close()
		check(worker.Stop(ctx))
		check(store.Close())
		check(os.RemoveAll(dir))
	}
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
