package server_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/server"
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
