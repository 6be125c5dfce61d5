package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/cairnflow/cairn/engine/store"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
)

// replay: the cost of loading and replaying a history, by length. Each
// history is built through the engine as a worker would write it (a claim,
// then step_completed appends fenced by the lease epoch, then
// task_completed), in chunks so that building a long one takes few round
// trips.

const (
	// replayChunk is the number of events per append while building.
	replayChunk = 2000
	// replayOwner is the lease owner the bench claims its tasks as.
	replayOwner = "cairn-bench-replay"
	// replayEventBudget sets the repetitions per size: about this many
	// events are loaded in all, within [replayMinReps, replayMaxReps].
	replayEventBudget = 1_000_000
	replayMinReps     = 5
	replayMaxReps     = 200
)

type replayRow struct {
	Events       int     `json:"events"`
	BuildSeconds float64 `json:"build_seconds"`
	Reps         int     `json:"reps"`
	// Medians over the repetitions: EventList of the task, history.Replay, both.
	LoadMs          float64 `json:"load_ms"`
	ReplayMs        float64 `json:"replay_ms"`
	TotalMs         float64 `json:"load_and_replay_ms"`
	EventsPerSecond float64 `json:"events_per_second"`
	// BytesPerEvent and AllocsPerEvent are runtime.MemStats TotalAlloc and
	// Mallocs over all repetitions, per event loaded and replayed.
	BytesPerEvent  float64 `json:"bytes_per_event"`
	AllocsPerEvent float64 `json:"allocs_per_event"`
}

type replayReport struct {
	benchHeader
	Params struct {
		Sizes []int `json:"sizes"`
		Chunk int   `json:"append_chunk"`
	} `json:"params"`
	Rows []replayRow `json:"rows"`
}

// Replay builds one task per entry of p.Sizes whose history has exactly
// that many events, written through the engine as a worker writes them,
// then loads and replays each repeatedly: median times, events/s, and
// bytes and allocations per event.
func Replay(ctx context.Context, cfg Config, p Params) error {
	f := &p
	if err := f.validate(); err != nil {
		return err
	}
	if err := positive(intFlag{"sizes", len(f.Sizes)}); err != nil {
		return err
	}
	env, closeEnv, err := openBench(ctx, cfg, "replay")
	if err != nil {
		return err
	}
	defer closeEnv()
	if err := env.reset(ctx); err != nil {
		return err
	}
	client, err := sdk.NewClient(env.clientConfig())
	if err != nil {
		return err
	}
	defer client.Close()
	st, err := env.workerStore()
	if err != nil {
		return err
	}
	if f.CPUProfile != "" {
		// A path that cannot be written fails now, not after the builds.
		probe, err := os.Create(f.CPUProfile)
		if err != nil {
			return errmark.Mark(errors.Wrap(err, "--cpuprofile"), ErrConfig)
		}
		_ = probe.Close()
	}
	ids := make([]uuid.UUID, len(f.Sizes))
	buildTimes := make([]time.Duration, len(f.Sizes))
	for i, size := range f.Sizes {
		built := time.Now()
		if ids[i], err = buildHistory(ctx, client, st, env.cfg.Namespace, size); err != nil {
			return errors.Wrapf(err, "build a history of %d events", size)
		}
		buildTimes[i] = time.Since(built)
	}
	stopProfile, err := startCPUProfile(f.CPUProfile)
	if err != nil {
		return err
	}
	var rows []replayRow
	for i, size := range f.Sizes {
		buildTime := buildTimes[i]
		row, err := measureReplay(ctx, st, ids[i], size)
		if err != nil {
			_ = stopProfile()
			return errors.Wrapf(err, "replay a history of %d events", size)
		}
		row.BuildSeconds = buildTime.Seconds()
		env.logf("replay: %d events: built in %.2f s, load+replay %.3f ms", size, row.BuildSeconds, row.TotalMs)
		rows = append(rows, row)
	}
	if err := stopProfile(); err != nil {
		return err
	}
	if env.cfg.JSON {
		r := replayReport{benchHeader: env.header, Rows: rows}
		r.Params.Sizes, r.Params.Chunk = f.Sizes, replayChunk
		return printJSON(env.cfg.Stdout, r)
	}
	w := newTable(env.cfg.Stdout)
	fmt.Fprintf(w, "mode:\treplay: load (Store.EventList) and replay (history.Replay) one task's history; medians\n")
	printBenchEnv(w, env.header)
	fmt.Fprintf(w, "\nEVENTS\tBUILD S\tREPS\tLOAD MS\tREPLAY MS\tTOTAL MS\tEVENTS/S\tBYTES/EVENT\tALLOCS/EVENT\n")
	for _, r := range rows {
		fmt.Fprintf(w, "%d\t%.2f\t%d\t%.3f\t%.3f\t%.3f\t%.0f\t%.0f\t%.1f\n", r.Events, r.BuildSeconds, r.Reps,
			r.LoadMs, r.ReplayMs, r.TotalMs, r.EventsPerSecond, r.BytesPerEvent, r.AllocsPerEvent)
	}
	return w.Flush()
}

// buildHistory makes a completed task with exactly events events: client
// starts it, and st, as a worker's, claims it and appends its events.
func buildHistory(ctx context.Context, client *sdk.Client, st store.Store, namespace string, events int) (uuid.UUID, error) {
	res, err := client.StartDynamic(ctx, sdk.TypeRef{Name: benchReplayType, Version: 1}, json.RawMessage(`{}`), nil)
	if err != nil {
		return uuid.Nil, err
	}
	got, err := st.TaskClaim(ctx, &store.TaskClaimParams{
		Namespace: namespace, Queues: []string{"default"},
		Types: []store.TypeKey{{Type: benchReplayType, Version: 1}},
		Owner: replayOwner, Max: 1, LeaseTTL: time.Hour,
	})
	if err != nil {
		return uuid.Nil, err
	}
	claimed := got.Tasks
	if len(claimed) != 1 || claimed[0].Task.ID != res.ID {
		return uuid.Nil, errors.AssertionFailedf("claimed %d tasks, expected task %s", len(claimed), res.ID)
	}
	state := claimed[0].State
	appendEvents := func(payloads []history.Payload) error {
		state, err = st.EventAppend(ctx, &store.EventAppendParams{
			TaskID: res.ID, State: state, Epoch: state.Lease.Epoch, Attempt: state.Attempt, Payloads: payloads,
		})
		return err
	}
	steps := events - 3
	payloads := make([]history.Payload, 0, replayChunk)
	for pos := 0; pos < steps; {
		payloads = payloads[:0]
		for k := min(replayChunk, steps-pos); k > 0; k-- {
			payloads = append(payloads, history.StepCompletedData{
				Position: pos, Name: "s" + strconv.Itoa(pos+1), Output: json.RawMessage(`{}`),
			})
			pos++
		}
		if err := appendEvents(payloads); err != nil {
			return uuid.Nil, err
		}
	}
	if err := appendEvents([]history.Payload{history.TaskCompletedData{Output: json.RawMessage(strconv.Itoa(steps))}}); err != nil {
		return uuid.Nil, err
	}
	return res.ID, nil
}

// measureReplay loads and replays the task's history repeatedly.
func measureReplay(ctx context.Context, st store.Store, id uuid.UUID, events int) (replayRow, error) {
	reps := min(max(replayEventBudget/events, replayMinReps), replayMaxReps)
	loads := make([]time.Duration, reps)
	replays := make([]time.Duration, reps)
	totals := make([]time.Duration, reps)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range reps {
		t0 := time.Now()
		evs, err := store.TaskEvents(ctx, st, "", id)
		if err != nil {
			return replayRow{}, err
		}
		t1 := time.Now()
		state, err := history.Replay(evs)
		if err != nil {
			return replayRow{}, err
		}
		t2 := time.Now()
		if len(evs) != events || state.Status != history.StatusCompleted {
			return replayRow{}, errors.AssertionFailedf("loaded %d events replaying to %s, built %d completed", len(evs), state.Status, events)
		}
		loads[i], replays[i], totals[i] = t1.Sub(t0), t2.Sub(t1), t2.Sub(t0)
	}
	runtime.ReadMemStats(&after)
	median := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	total := median(totals)
	loaded := float64(reps) * float64(events)
	return replayRow{
		Events: events, Reps: reps,
		LoadMs: ms(median(loads)), ReplayMs: ms(median(replays)), TotalMs: ms(total),
		EventsPerSecond: perSecond(int64(events), total),
		BytesPerEvent:   float64(after.TotalAlloc-before.TotalAlloc) / loaded,
		AllocsPerEvent:  float64(after.Mallocs-before.Mallocs) / loaded,
	}, nil
}
