// Package invoices is the service docs/getting-started.md builds: an HTTP
// API that accepts invoices and answers at once, a workflow that reads
// their pages, extracts the total and waits for a person's approval, and
// a worker that runs it. service_test.go runs it on the embedded store and
// on PostgreSQL, and holds the page's snippets to this code.
package invoices

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// NewWorker returns a worker that runs the invoice workflows.
func NewWorker(cfg sdk.WorkerConfig) (*sdk.Worker, error) {
	worker, err := sdk.NewWorker(cfg)
	if err != nil {
		return nil, err
	}
	sdk.Register(worker, Process)
	sdk.Register(worker, ReadPage)
	return worker, nil
}

// Handler is the service's HTTP API:
//
//	POST /invoices                 start processing an invoice: 202 {"task_id": ...}
//	POST /invoices/{id}/approval   a person's decision: {"approved": true, "comment": "..."}
//	GET  /invoices/{id}            the result, or 202 with the status while it runs
func Handler(client *sdk.Client) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /invoices", func(w http.ResponseWriter, r *http.Request) {
		var inv Invoice
		if err := json.NewDecoder(r.Body).Decode(&inv); err != nil || inv.ID == "" {
			http.Error(w, "want {\"id\": ..., \"pages\": [...]}", http.StatusBadRequest)
			return
		}
		// The idempotency key makes a retried upload return the same task.
		run, err := sdk.Start(r.Context(), client, Process, inv, &sdk.StartOpts{IdempotencyKey: "invoice-" + inv.ID})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"task_id": run.ID})
	})
	mux.HandleFunc("POST /invoices/{id}/approval", func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(r.PathValue("id"))
		var d workflow.Decision
		if err == nil {
			err = json.NewDecoder(r.Body).Decode(&d)
		}
		if err != nil {
			http.Error(w, "want a task id and {\"approved\": true|false}", http.StatusBadRequest)
			return
		}
		if _, err := client.Signal(r.Context(), id, "approval", d, nil); err != nil {
			http.Error(w, err.Error(), statusOf(err))
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("GET /invoices/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(r.PathValue("id"))
		if err != nil {
			http.Error(w, "not a task id", http.StatusBadRequest)
			return
		}
		run := sdk.RunOf(client, Process, id)
		info, err := run.Info(r.Context())
		if err != nil {
			http.Error(w, err.Error(), statusOf(err))
			return
		}
		if !info.Status.Terminal() {
			writeJSON(w, http.StatusAccepted, map[string]any{"status": info.Status})
			return
		}
		result, err := run.Result(r.Context()) // finished: returns at once
		var failed *sdk.TaskError
		if errors.As(err, &failed) {
			writeJSON(w, http.StatusOK, map[string]any{"status": failed.Status, "error": failed.Message})
			return
		}
		if err != nil {
			http.Error(w, err.Error(), statusOf(err))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": info.Status, "result": result})
	})
	return mux
}

// statusOf maps the SDK's sentinel errors to HTTP statuses.
func statusOf(err error) int {
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, sdk.ErrTaskState):
		return http.StatusConflict
	case errors.Is(err, sdk.ErrInvalid):
		return http.StatusBadRequest
	default:
		return http.StatusInternalServerError
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Serve runs the worker and the API on addr until ctx ends, then stops
// both gracefully.
func Serve(ctx context.Context, addr string, client *sdk.Client, worker *sdk.Worker) error {
	if err := worker.Start(ctx); err != nil {
		return err
	}
	srv := &http.Server{Addr: addr, Handler: Handler(client), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		stop, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(stop)
		_ = worker.Stop(stop)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
