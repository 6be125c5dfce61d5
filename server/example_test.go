package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/internal/examplekit"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server"
	"github.com/cairnflow/cairn/workflow"
)

// A service mounts the API and the console under /cairn/ in its own mux,
// beside its own handlers. The store here is the embedded one; a service
// on PostgreSQL passes its PostgreSQL store.
func Example_mount() {
	ctx := context.Background()
	store, err := sqlitestore.Open(ctx, ":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	srv, err := server.New(server.Config{Store: store, Prefix: "/cairn"})
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil { // the notifier that wakes long polls
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/cairn/", http.StripPrefix("/cairn", srv.Handler()))
	mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "orders") })

	// A service serves mux with its own http.Server; here, a test one.
	hs := httptest.NewServer(mux)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/cairn/healthz", "/cairn/", "/orders"} {
		resp, err := client.Get(hs.URL + path)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(path, resp.StatusCode, resp.Header.Get("Location"), strings.TrimSpace(string(body)))
	}

	// Shutting down: drain (/readyz answers 503, long polls answer now),
	// shut the http.Server down, then stop the server's background work.
	srv.Drain()
	hs.Close()
	if err := srv.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// /cairn/healthz 200  {"status":"ok"}
	// /cairn/ 302 /cairn/console/ <a href="/cairn/console/">Found</a>.
	// /orders 200  orders
}

// A producer in any language starts a task over HTTP and long-polls its
// result; a worker (here in the same process) runs it.
func ExampleNew() {
	greet := sdk.NewWorkflow("example.greet", 1, func(ctx workflow.Context, name string) (string, error) {
		return "hello, " + name, nil
	}, nil)
	env, stop := examplekit.Start(func(w *sdk.Worker) { sdk.Register(w, greet) })
	defer stop()
	ctx := context.Background()
	srv, err := server.New(server.Config{Store: env.Store})
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = srv.Stop(ctx) }()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	resp, err := http.Post(hs.URL+"/v1/tasks", "application/json",
		strings.NewReader(`{"type": "example.greet", "input": "ada", "idempotency_key": "greet-ada"}`))
	if err != nil {
		log.Fatal(err)
	}
	var started struct{ ID, Status string }
	_ = json.NewDecoder(resp.Body).Decode(&started)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, started.Status)

	resp, err = http.Get(hs.URL + "/v1/tasks/" + started.ID + "/wait?timeout=30s")
	if err != nil {
		log.Fatal(err)
	}
	var done struct {
		Status string
		Output string
	}
	_ = json.NewDecoder(resp.Body).Decode(&done)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, done.Status, done.Output)
	// Output:
	// 202 pending
	// 200 completed hello, ada
}
