package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// children: one parent workflow fans out to N trivial child workflows
// (workflow.MapChildren) and waits for all of them. The workers run in
// this process, parent and children alike, so the CPU reported is this
// process's (getrusage): the workers, the clients and the drain's poll;
// the database's own CPU is not in it.

const (
	benchFanoutType      = "bench.fanout"
	benchFanoutChildType = "bench.fanout.child"
	benchFanoutChunkType = "bench.fanout.chunk"
	// maxBenchChildren bounds -n.
	maxBenchChildren = 1_000_000
)

// Fan-out strategies (--strategy).
const (
	// StrategyFlat is one parent whose MapChildren starts every child.
	StrategyFlat = "flat"
	// StrategyTree is one parent whose workflow.MapChunks starts a chunk
	// child per --chunk children, each the parent of its chunk's.
	StrategyTree = "tree"
	// StrategyAuto is flat up to --chunk children, a tree above.
	StrategyAuto = "auto"
)

// ChildrenParams are the parameters of [Children], one field per flag of
// `cairn bench children`.
type ChildrenParams struct {
	Children    int           // -n: children of the one parent
	Workers     int           // --workers: in-process workers sharing one pool
	Concurrency int           // --concurrency: tasks one worker runs at once
	MaxConns    int           // --max-conns: connections in the workers' pool
	MaxRunning  int           // --max-running: the parent type's MaxRunningChildren (0: the default, 100)
	Strategy    string        // --strategy: flat, tree, or auto
	Chunk       int           // --chunk: children per chunk of a tree
	Timeout     time.Duration // --timeout: give up after this long
	DrainPoll   time.Duration // --poll-interval: how often the run polls for the end
	CPUProfile  string        // --cpuprofile: a Go CPU profile of the run goes here
}

func (p *ChildrenParams) validate() error {
	bad := func(format string, args ...any) error {
		return errmark.Mark(errors.Newf(format, args...), ErrConfig)
	}
	switch {
	case p.Children < 1 || p.Children > maxBenchChildren:
		return bad("-n %d: use 1 to %d children", p.Children, maxBenchChildren)
	case p.Workers < 1 || p.Workers > 64:
		return bad("--workers %d: use 1 to 64", p.Workers)
	case p.Concurrency < 1 || p.Concurrency > 100_000:
		return bad("--concurrency %d: use 1 to 100000", p.Concurrency)
	case p.MaxConns < 1 || p.MaxConns > 1000:
		return bad("--max-conns %d: use 1 to 1000", p.MaxConns)
	case p.MaxRunning < 0 || p.MaxRunning > maxBenchChildren:
		return bad("--max-running %d: use 0 (the default, %d) to %d", p.MaxRunning, 100, maxBenchChildren)
	case p.Strategy != StrategyFlat && p.Strategy != StrategyTree && p.Strategy != StrategyAuto:
		return bad("--strategy %q: use flat, tree or auto", p.Strategy)
	case p.Chunk < 1 || p.Chunk > 20_000:
		return bad("--chunk %d: use 1 to 20000 children per chunk", p.Chunk)
	case p.Timeout <= 0:
		return bad("--timeout %s: must be positive", p.Timeout)
	case p.DrainPoll < time.Millisecond || p.DrainPoll > 10*time.Second:
		return bad("--poll-interval %s: use 1ms to 10s", p.DrainPoll)
	}
	return nil
}

// fanoutInput is the bench parent's input.
type fanoutInput struct {
	Children int `json:"children"`
	// Chunk, when set, fans out in a tree: workflow.MapChunks of this
	// many children per chunk.
	Chunk int `json:"chunk,omitempty"`
}

// fanoutTypes are the bench's workflow types: the parent, the chunk of a
// tree, and the child, which returns its input.
type fanoutTypes struct {
	parent *sdk.Workflow[fanoutInput, int]
	chunk  *sdk.Workflow[[]int, []int]
	child  *sdk.Workflow[int, int]
}

// newFanoutWorkflows returns the bench's types; maxRunning is the
// MaxRunningChildren of the parent and the chunk.
func newFanoutWorkflows(maxRunning int) fanoutTypes {
	var t fanoutTypes
	opts := sdk.WorkflowOpts{MaxRunningChildren: maxRunning}
	t.child = sdk.NewWorkflow(benchFanoutChildType, 1, func(_ workflow.Context, in int) (int, error) {
		return in, nil
	}, nil)
	t.chunk = sdk.NewWorkflow(benchFanoutChunkType, 1, workflow.Chunk(t.child, nil), &opts)
	t.parent = sdk.NewWorkflow(benchFanoutType, 1, func(ctx workflow.Context, in fanoutInput) (int, error) {
		inputs := make([]int, in.Children)
		for i := range inputs {
			inputs[i] = i
		}
		var outs []int
		var err error
		if in.Chunk > 0 {
			outs, err = workflow.MapChunks(ctx, t.chunk, inputs, in.Chunk, nil)
		} else {
			outs, err = workflow.MapChildren(ctx, t.child, inputs, nil)
		}
		if err != nil {
			return 0, err
		}
		for i, out := range outs {
			if out != i {
				return 0, errors.Newf("output %d is %d", i, out)
			}
		}
		return len(outs), nil
	}, &opts)
	return t
}

// childrenResult is one fan-out's figures.
type childrenResult struct {
	Strategy string `json:"strategy"`
	// WallSeconds runs from the parent's start to the poll that saw every
	// task finished; ParentSeconds from the parent's created_at to its
	// finished_at (no poll granularity).
	WallSeconds   float64 `json:"wall_seconds"`
	ParentSeconds float64 `json:"parent_seconds"`
	// CPUSeconds is this process's user and system CPU over the run: the
	// in-process workers (parent and children), the client and the poll.
	CPUSeconds float64 `json:"cpu_seconds"`
	// Per child: wall time and CPU divided by the children.
	WallMsPerChild float64 `json:"wall_ms_per_child"`
	CPUMsPerChild  float64 `json:"cpu_ms_per_child"`
	// ParentAttempts is the parent's attempts: one per wake.
	ParentAttempts int `json:"parent_attempts"`
	// ParentEvents is the length of the parent's history.
	ParentEvents int `json:"parent_events"`
	// Of a tree: the chunks, their attempts in all, and the longest
	// chunk history.
	Chunks         int   `json:"chunks,omitempty"`
	ChunkAttempts  int   `json:"chunk_attempts,omitempty"`
	ChunkEventsMax int   `json:"chunk_events_max,omitempty"`
	Completed      int64 `json:"completed"`
	Events         int64 `json:"events"`
}

type childrenReport struct {
	benchHeader
	Params struct {
		Children    int    `json:"children"`
		Workers     int    `json:"workers"`
		Concurrency int    `json:"concurrency"`
		MaxConns    int    `json:"max_conns"`
		MaxRunning  int    `json:"max_running_children"`
		Strategy    string `json:"strategy"`
		Chunk       int    `json:"chunk,omitempty"`
		WorkersIn   string `json:"workers_in"`
	} `json:"params"`
	childrenResult
}

// Children starts one parent whose MapChildren fans out to p.Children
// trivial children, runs it to its end with p.Workers in-process workers,
// and reports the wall time, this process's CPU, both per child, and the
// parent's attempts and history length.
func Children(ctx context.Context, cfg Config, p ChildrenParams) error {
	if err := p.validate(); err != nil {
		return err
	}
	strategy := p.Strategy
	if strategy == StrategyAuto {
		strategy = StrategyFlat
		if p.Children > p.Chunk {
			strategy = StrategyTree
		}
	}
	input := fanoutInput{Children: p.Children}
	if strategy == StrategyTree {
		input.Chunk = p.Chunk
	}
	env, closeEnv, err := openBench(ctx, cfg, "children")
	if err != nil {
		return err
	}
	defer closeEnv()
	if err := env.reset(ctx); err != nil {
		return err
	}
	target, closeTarget, err := env.target(ctx, p.MaxConns)
	if err != nil {
		return err
	}
	defer closeTarget()
	types := newFanoutWorkflows(p.MaxRunning)
	workers := make([]*sdk.Worker, 0, p.Workers)
	defer func() { _ = stopWorkers(workers) }()
	for range p.Workers {
		w, err := sdk.NewWorker(sdk.WorkerConfig{
			Pool: target.pool, Store: target.store(), Schema: env.cfg.Schema, ListenURL: env.cfg.ListenURL,
			Namespace: env.cfg.Namespace, Concurrency: p.Concurrency, PollInterval: benchWorkerPollInterval,
			Logger: benchLogger(), Keys: env.cfg.Keys,
		})
		if err != nil {
			return err
		}
		err = errors.CombineErrors(sdk.RegisterSafely(w, types.parent),
			errors.CombineErrors(sdk.RegisterSafely(w, types.chunk), sdk.RegisterSafely(w, types.child)))
		if err != nil {
			return err
		}
		if err := w.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		workers = append(workers, w)
	}
	client, err := sdk.NewClient(target.clientConfig(env.cfg))
	if err != nil {
		return err
	}
	defer client.Close()
	env.logf("children: one parent, %d children (%s), %d worker(s) × %d slots, pool of %d",
		p.Children, strategy, p.Workers, p.Concurrency, p.MaxConns)
	stopProfile, err := startCPUProfile(p.CPUProfile)
	if err != nil {
		return err
	}
	defer func() { _ = stopProfile() }()
	cpu0 := processCPU()
	var parentID uuid.UUID
	timing, err := env.awaitDrain(ctx, func() error {
		run, err := sdk.Start(ctx, client, types.parent, input, nil)
		if err != nil {
			return err
		}
		parentID = run.ID
		return nil
	}, p.DrainPoll, p.Timeout, 0)
	if err != nil {
		return err
	}
	cpu := processCPU() - cpu0
	if err := stopProfile(); err != nil {
		return err
	}
	res, err := childrenFigures(ctx, env, client, parentID, p.Children, timing.drain, cpu)
	if err != nil {
		return err
	}
	res.Strategy = strategy
	if strategy == StrategyTree {
		if err := chunkFigures(ctx, client, parentID, &res); err != nil {
			return err
		}
	}
	if err := stopWorkers(workers); err != nil {
		return errors.Wrap(err, "stop workers")
	}
	return printChildren(env, &p, res)
}

// childrenFigures reads the parent's end and history and the database's
// account of the run, and computes the figures.
func childrenFigures(ctx context.Context, env *benchEnv, client *sdk.Client, parentID uuid.UUID, n int, wall, cpu time.Duration) (childrenResult, error) {
	info, err := client.Get(ctx, parentID)
	if err != nil {
		return childrenResult{}, err
	}
	events, err := client.History(ctx, parentID)
	if err != nil {
		return childrenResult{}, err
	}
	s, err := env.summary(ctx)
	if err != nil {
		return childrenResult{}, err
	}
	r := childrenResult{
		WallSeconds: wall.Seconds(), CPUSeconds: cpu.Seconds(),
		WallMsPerChild: ms(wall) / float64(n), CPUMsPerChild: ms(cpu) / float64(n),
		ParentAttempts: info.Attempt, ParentEvents: len(events),
		Completed: s.completed, Events: s.events,
	}
	if info.FinishedAt != nil {
		r.ParentSeconds = info.FinishedAt.Sub(info.CreatedAt).Seconds()
	}
	if info.Status != history.StatusCompleted {
		return r, errors.Newf("the parent ended %s, not completed: the figures are not valid", info.Status)
	}
	return r, nil
}

// chunkFigures adds the chunks' attempts and longest history to r.
func chunkFigures(ctx context.Context, client *sdk.Client, parentID uuid.UUID, r *childrenResult) error {
	events, err := client.History(ctx, parentID)
	if err != nil {
		return err
	}
	state, err := history.Replay(events)
	if err != nil {
		return err
	}
	for _, c := range state.Children {
		id, err := uuid.Parse(c.ID)
		if err != nil {
			return errors.Wrapf(err, "chunk %d", c.Position)
		}
		info, err := client.Get(ctx, id)
		if err != nil {
			return err
		}
		chunkEvents, err := client.History(ctx, id)
		if err != nil {
			return err
		}
		r.Chunks++
		r.ChunkAttempts += info.Attempt
		r.ChunkEventsMax = max(r.ChunkEventsMax, len(chunkEvents))
	}
	return nil
}

func printChildren(env *benchEnv, p *ChildrenParams, r childrenResult) error {
	if env.cfg.JSON {
		rep := childrenReport{benchHeader: env.header, childrenResult: r}
		rep.Params.Children, rep.Params.Workers, rep.Params.Concurrency = p.Children, p.Workers, p.Concurrency
		rep.Params.MaxConns, rep.Params.MaxRunning, rep.Params.Strategy = p.MaxConns, p.MaxRunning, r.Strategy
		if r.Strategy == StrategyTree {
			rep.Params.Chunk = p.Chunk
		}
		rep.Params.WorkersIn = "the bench process"
		return printJSON(env.cfg.Stdout, rep)
	}
	w := newTable(env.cfg.Stdout)
	maxRunning := fmt.Sprint(p.MaxRunning)
	if p.MaxRunning == 0 {
		maxRunning = "default (100)"
	}
	strategy := r.Strategy
	if strategy == StrategyTree {
		strategy = fmt.Sprintf("tree of chunks of %d (workflow.MapChunks)", p.Chunk)
	}
	fmt.Fprintf(w, "mode:\tchildren: one parent, %d children, %s; MaxRunningChildren %s; %d in-process worker(s) × %d slots, pool of %d\n",
		p.Children, strategy, maxRunning, p.Workers, p.Concurrency, p.MaxConns)
	fmt.Fprintf(w, "wall:\t%.3f s\t%.3f ms per child (parent start → poll saw all finished); parent created → finished %.3f s\n",
		r.WallSeconds, r.WallMsPerChild, r.ParentSeconds)
	fmt.Fprintf(w, "cpu:\t%.3f s\t%.3f ms per child (this process: workers, client, poll; not the database's)\n",
		r.CPUSeconds, r.CPUMsPerChild)
	fmt.Fprintf(w, "parent:\t%d attempts\t%d events in its history\n", r.ParentAttempts, r.ParentEvents)
	if r.Chunks > 0 {
		fmt.Fprintf(w, "chunks:\t%d attempts\t%d chunks, the longest history %d events\n", r.ChunkAttempts, r.Chunks, r.ChunkEventsMax)
	}
	fmt.Fprintf(w, "tasks:\t%d completed\t%d events written\n", r.Completed, r.Events)
	printBenchEnv(w, env.header)
	return w.Flush()
}
