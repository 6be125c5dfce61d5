package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/activities"
	"github.com/cairnflow/cairn/engine/sqlitestore"
	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server"
	"github.com/cairnflow/cairn/workflow"
)

// entry is a stream entry as every reader reports it.
type entry struct {
	Seq      int64
	Kind     string
	Stream   string
	Attempt  int
	Position int
	Data     string // the chunk's JSON
}

// shown applies entries as a reader that shows chunks does: a rewind
// drops its attempt's chunks.
func shown(entries []entry) []entry {
	var out []entry
	for _, e := range entries {
		switch e.Kind {
		case "chunk":
			out = append(out, e)
		case "rewind":
			out = slices.DeleteFunc(out, func(c entry) bool {
				return c.Attempt == e.Attempt && c.Position == e.Position && c.Stream == e.Stream
			})
		}
	}
	return out
}

// TestStreamReachesEveryReader streams 10,000 chunks from a simulated LLM
// step, whose first attempt fails after 500, to three readers at once:
// the Go client, Server-Sent Events with a client that drops the
// connection mid-stream and resumes from its Last-Event-ID, and `cairn
// task watch`. Each sees every entry once, in order: the first attempt's
// 500 chunks, their rewind, the second attempt's 10,000, its end. The
// history grows by as many events for 10,000 chunks as for 1,000.
func TestStreamReachesEveryReader(t *testing.T) {
	for name, target := range cliTargets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tg := target(t)
			s := openTargetStore(t, tg)
			var calls atomic.Int32 // the step's runs, over both tasks
			retry := activities.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, Multiplier: 1, MaxInterval: time.Millisecond}
			wf := sdk.NewWorkflow("llm.answer", 1, func(ctx workflow.Context, n int) (int, error) {
				return workflow.Step(ctx, "answer", func(ctx context.Context) (int, error) {
					info, _ := activities.GetInfo(ctx)
					calls.Add(1)
					for i := range n {
						if info.Attempt == 1 && i == 500 {
							return 0, errors.New("model overloaded")
						}
						if err := activities.Stream(ctx, "tokens", fmt.Sprintf("tok%d ", i)); err != nil {
							return 0, err
						}
					}
					return n, nil
				}, nil)
			}, &sdk.WorkflowOpts{Retry: &retry})
			w, err := sdk.NewWorker(sdk.WorkerConfig{Store: s, Namespace: "clitest", PollInterval: 50 * time.Millisecond})
			require.NoError(t, err)
			sdk.Register(w, wf)
			client, err := sdk.NewClient(sdk.ClientConfig{Store: s, Namespace: "clitest"})
			require.NoError(t, err)
			t.Cleanup(client.Close)
			srv, err := server.New(server.Config{Store: s})
			require.NoError(t, err)
			hs := httptest.NewServer(srv.Handler())
			t.Cleanup(hs.Close)

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			run, err := sdk.Start(ctx, client, wf, 10_000, nil)
			require.NoError(t, err)

			// The three readers begin before the first chunk is written.
			type result struct {
				who     string
				entries []entry
				err     error
			}
			results := make(chan result, 3)
			go func() {
				var got []entry
				for it, err := range client.Stream(ctx, run.ID, 0, nil) {
					if err != nil {
						results <- result{"go", got, err}
						return
					}
					if it.Seq > 0 {
						got = append(got, entry{it.Seq, string(it.Kind), it.Stream, it.Attempt, it.Position, string(it.Data)})
					}
				}
				results <- result{"go", got, nil}
			}()
			go func() {
				got, err := readSSE(ctx, hs.URL+"/v1/tasks/"+run.ID.String()+"/stream?namespace=clitest", 3_000)
				results <- result{"sse", got, err}
			}()
			go func() {
				out, stderr, err := tg.run(t, "task", "watch", run.ID.String(), "-o", "json", "--poll", "50ms")
				if err != nil {
					err = fmt.Errorf("%w: %s", err, stderr)
				}
				got, perr := watchEntries(out)
				results <- result{"watch", got, errors.Join(err, perr)}
			}()
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })

			var want []entry
			for range 3 {
				r := <-results
				require.NoError(t, r.err, r.who)
				require.Len(t, r.entries, 500+1+10_000+1, r.who)
				for i, e := range r.entries {
					require.EqualValues(t, i+1, e.Seq, "%s: every entry once, in order", r.who)
				}
				require.Equal(t, entry{501, "rewind", "tokens", 1, 0, ""}, r.entries[500], "%s: the first attempt's chunks rewound", r.who)
				require.Equal(t, "end", r.entries[len(r.entries)-1].Kind, r.who)
				answer := shown(r.entries)
				require.Len(t, answer, 10_000, r.who)
				for i, c := range answer {
					require.Equal(t, 2, c.Attempt, r.who)
					require.Equal(t, strconv.Quote(fmt.Sprintf("tok%d ", i)), c.Data, r.who)
				}
				if want == nil {
					want = r.entries
				}
				require.Equal(t, want, r.entries, "%s reads what the others read", r.who)
			}
			info, err := client.Wait(ctx, run.ID)
			require.NoError(t, err)
			require.Equal(t, history.StatusCompleted, info.Status)

			// The history holds one stream_closed per attempt, whatever
			// the chunks: as many events for 1,000 chunks as for 10,000.
			small, err := sdk.Start(ctx, client, wf, 1_000, nil)
			require.NoError(t, err)
			_, err = client.Wait(ctx, small.ID)
			require.NoError(t, err)
			large, err := client.History(ctx, run.ID)
			require.NoError(t, err)
			short, err := client.History(ctx, small.ID)
			require.NoError(t, err)
			require.Equal(t, len(short), len(large), "the history does not grow with the chunks")
			require.Less(t, len(large), 12)
			var closed []history.StreamClosedData
			for _, e := range large {
				if c, ok := e.Data.(history.StreamClosedData); ok {
					closed = append(closed, c)
				}
			}
			require.Len(t, closed, 2)
			require.Equal(t, history.StreamRewound, closed[0].Outcome)
			require.EqualValues(t, 500, closed[0].Chunks)
			require.Equal(t, history.StreamCompleted, closed[1].Outcome)
			require.EqualValues(t, 10_000, closed[1].Chunks)
			require.Equal(t, int32(4), calls.Load())
		})
	}
}

// openTargetStore opens the target's store for a worker, a client and a
// server of the test's own.
func openTargetStore(t *testing.T, tg cliTarget) store.Store {
	t.Helper()
	if i := slices.Index(tg.flags, "--db"); i >= 0 {
		opened, err := sqlitestore.Open(context.Background(), tg.flags[i+1])
		require.NoError(t, err)
		t.Cleanup(func() { _ = opened.Close() })
		return opened
	}
	var s store.Store
	tg.withStore(t, func(st store.Store) { s = st })
	return s
}

// readSSE reads a task's stream from url as Server-Sent Events until the
// finished status, dropping the connection after dropAfter chunks and
// resuming from the last event id it received.
func readSSE(ctx context.Context, url string, dropAfter int) ([]entry, error) {
	var got []entry
	lastID := ""
	for connection := 0; connection < 10; connection++ {
		finished, err := func() (bool, error) {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel() // drops the connection
			req, err := http.NewRequestWithContext(cctx, http.MethodGet, url, nil)
			if err != nil {
				return false, err
			}
			req.Header.Set("Accept", "text/event-stream")
			if lastID != "" {
				req.Header.Set("Last-Event-ID", lastID)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				return false, fmt.Errorf("status %d, %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			var id, event, data string
			for sc.Scan() {
				line := sc.Text()
				switch {
				case strings.HasPrefix(line, "id: "):
					id = strings.TrimPrefix(line, "id: ")
				case strings.HasPrefix(line, "event: "):
					event = strings.TrimPrefix(line, "event: ")
				case strings.HasPrefix(line, "data: "):
					data = strings.TrimPrefix(line, "data: ")
				case line == "" && event != "":
					switch event {
					case "status":
						var st struct{ Finished bool }
						if err := json.Unmarshal([]byte(data), &st); err != nil {
							return false, err
						}
						if st.Finished {
							return true, nil
						}
					default:
						var e struct {
							Seq      int64
							Stream   string
							Attempt  int
							Position int
							Data     json.RawMessage
						}
						if err := json.Unmarshal([]byte(data), &e); err != nil {
							return false, err
						}
						if strconv.FormatInt(e.Seq, 10) != id {
							return false, fmt.Errorf("event id %q for entry %d", id, e.Seq)
						}
						got = append(got, entry{e.Seq, event, e.Stream, e.Attempt, e.Position, string(e.Data)})
						lastID = id
						if connection == 0 && event == "chunk" && len(got) == dropAfter {
							return false, nil // drop the connection mid-stream
						}
					}
					id, event, data = "", "", ""
				}
			}
			return false, fmt.Errorf("the stream ended before the task finished: %v", sc.Err())
		}()
		if err != nil || finished {
			return got, err
		}
	}
	return got, errors.New("too many connections")
}

// watchEntries reads the stream entries `cairn task watch -o json`
// printed among the events.
func watchEntries(out string) ([]entry, error) {
	var got []entry
	for line := range strings.Lines(out) {
		var e struct {
			Kind     string
			Seq      int64
			Stream   string
			Attempt  int
			Position int
			Data     json.RawMessage
			Type     string
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return got, fmt.Errorf("line %q: %w", line, err)
		}
		if e.Kind != "" {
			got = append(got, entry{e.Seq, e.Kind, e.Stream, e.Attempt, e.Position, string(e.Data)})
		}
	}
	return got, nil
}
