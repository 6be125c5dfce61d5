// Command invoices runs the service of docs/getting-started.md: on
// PostgreSQL when DATABASE_URL is set, else on the embedded store in
// invoices.db.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnflow/cairn/engine/pgstore"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/examples/invoices"
	"github.com/cairnflow/cairn/sdk"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	clientCfg, workerCfg, err := configs(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	client, err := sdk.NewClient(clientCfg)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	worker, err := invoices.NewWorker(workerCfg)
	if err != nil {
		log.Fatal(err)
	}
	log.Print("invoices: listening on 127.0.0.1:8080")
	if err := invoices.Serve(ctx, "127.0.0.1:8080", client, worker); err != nil {
		log.Fatal(err)
	}
}

// configs connects to PostgreSQL at url (applying cairn's migrations), or
// opens the embedded store when url is empty.
func configs(ctx context.Context, url string) (sdk.ClientConfig, sdk.WorkerConfig, error) {
	if url == "" {
		store, err := sqlitestore.Open(ctx, "invoices.db")
		if err != nil {
			return sdk.ClientConfig{}, sdk.WorkerConfig{}, err
		}
		return sdk.ClientConfig{Store: store}, sdk.WorkerConfig{Store: store}, nil
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return sdk.ClientConfig{}, sdk.WorkerConfig{}, err
	}
	if _, err := pgstore.Migrate(ctx, pool, pgstore.DefaultSchema); err != nil {
		return sdk.ClientConfig{}, sdk.WorkerConfig{}, err
	}
	return sdk.ClientConfig{Pool: pool}, sdk.WorkerConfig{Pool: pool}, nil
}
