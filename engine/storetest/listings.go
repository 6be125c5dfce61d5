package storetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/store"
)

var listingTests = []conformanceTest{
	{"TaskListOmitsPayloadsWhenAsked", testTaskListOmitsPayloads},
	{"TaskListPagesWithinMaxPayloadBytes", testTaskListPagesWithinMaxPayloadBytes},
	{"DeadLetterListOmitsPayloadsWhenAsked", testDeadLetterListOmitsPayloads},
}

// sizedInput is a JSON string input of about n bytes.
func sizedInput(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("x", n) + `"`)
}

func payloadBytes(task *store.Task) int { return len(task.Input) + len(task.Output) }

// storedPayloadBytes returns, by task, payloadBytes of its row as the
// store holds it.
func storedPayloadBytes(t *testing.T, s store.Store) map[uuid.UUID]int {
	t.Helper()
	ctx := testContext(t)
	raw := stored(s)
	tasks, err := raw.TaskGetMany(ctx, &store.TaskGetManyParams{IDs: allTaskIDs(t, raw)})
	require.NoError(t, err)
	out := make(map[uuid.UUID]int, len(tasks))
	for _, task := range tasks {
		out[task.ID] = payloadBytes(task)
	}
	return out
}

func testTaskListOmitsPayloads(t *testing.T, s store.Store) {
	ctx := testContext(t)
	done := start(t, s, spec{Input: sizedInput(1000)})
	complete(t, s, claimOne(t, s, "w", time.Minute))
	pending := start(t, s, spec{Input: sizedInput(2000)})

	list := func(p store.TaskListParams) map[uuid.UUID]*store.Task {
		t.Helper()
		p.Namespace = store.DefaultNamespace
		tasks, err := s.TaskList(ctx, &p)
		require.NoError(t, err)
		byID := map[uuid.UUID]*store.Task{}
		for _, task := range tasks {
			byID[task.ID] = task
		}
		require.Len(t, byID, 2)
		return byID
	}
	full := list(store.TaskListParams{})
	require.NotEmpty(t, full[done].Input)
	require.NotEmpty(t, full[done].Output)
	require.NotEmpty(t, full[pending].Input)

	lean := list(store.TaskListParams{OmitInput: true, OmitOutput: true})
	for id, task := range lean {
		require.Nil(t, task.Input, "task %s", id)
		require.Nil(t, task.Output, "task %s", id)
		// Everything else is what the full listing says.
		want := *full[id]
		want.Input, want.Output = nil, nil
		require.Equal(t, want, *task)
	}

	outputs := list(store.TaskListParams{OmitInput: true})
	require.Nil(t, outputs[done].Input)
	require.Equal(t, full[done].Output, outputs[done].Output)
	inputs := list(store.TaskListParams{OmitOutput: true})
	require.Nil(t, inputs[done].Output)
	require.Equal(t, full[done].Input, inputs[done].Input)
	require.Equal(t, full[pending].Input, inputs[pending].Input)

	// A byte bound with both payloads read returns them as they are.
	bounded := list(store.TaskListParams{MaxPayloadBytes: 1 << 20})
	for id, task := range bounded {
		require.Equal(t, *full[id], *task)
	}
}

func testTaskListPagesWithinMaxPayloadBytes(t *testing.T, s store.Store) {
	ctx := testContext(t)
	sizes := []int{300, 100, 500, 200, 900, 50, 400, 400, 100, 700}
	for _, n := range sizes {
		start(t, s, spec{Input: sizedInput(n)})
	}
	other := start(t, s, spec{Type: "other", Input: sizedInput(100)})
	all, err := s.TaskList(ctx, &store.TaskListParams{Namespace: store.DefaultNamespace, Type: defaultType})
	require.NoError(t, err)
	require.Len(t, all, len(sizes))

	// What a page's bound counts: the payloads as the store holds them
	// (encoded, under the payload codecs).
	size := storedPayloadBytes(t, s)
	for _, bound := range []int{1, 450, 1000, 2500, 100_000} {
		var got []*store.Task
		p := &store.TaskListParams{Namespace: store.DefaultNamespace, Type: defaultType, Limit: 4, MaxPayloadBytes: bound}
		for pages := 0; ; pages++ {
			require.Less(t, pages, 2*len(sizes)+2, "bound %d: paging must end", bound)
			page, err := s.TaskList(ctx, p)
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			require.LessOrEqual(t, len(page), p.Limit)
			total := 0
			for _, task := range page {
				require.NotEqual(t, other, task.ID, "the type filter holds")
				require.NotEmpty(t, task.Input, "bound %d: a listed task is whole", bound)
				total += size[task.ID]
			}
			if len(page) > 1 {
				require.LessOrEqual(t, total, bound, "bound %d: a page of several tasks stays within it", bound)
			}
			// The page is as long as the bound allows: the next task would
			// not have fitted.
			if next := len(got) + len(page); len(page) < p.Limit && next < len(all) {
				require.Greater(t, total+size[all[next].ID], bound, "bound %d: the page ended early", bound)
			}
			got = append(got, page...)
			p.Before = page[len(page)-1].ID
		}
		require.Equal(t, all, got, "bound %d: paging reaches every task, newest first, payloads whole", bound)
	}

	// Only the payloads read count: without the inputs, nothing is measured.
	outputs, err := s.TaskList(ctx, &store.TaskListParams{Namespace: store.DefaultNamespace, Type: defaultType,
		OmitInput: true, MaxPayloadBytes: 1})
	require.NoError(t, err)
	require.Len(t, outputs, len(sizes))
}

func testDeadLetterListOmitsPayloads(t *testing.T, s store.Store) {
	ctx := testContext(t)
	dead := start(t, s, spec{MaxAttempts: 1, Input: sizedInput(1000)})
	deadLetter(t, s, dead)
	full, err := s.DeadLetterList(ctx, &store.DeadLetterListParams{Namespace: store.DefaultNamespace})
	require.NoError(t, err)
	require.Len(t, full, 1)
	require.Equal(t, sizedInput(1000), full[0].Input)

	lean, err := s.DeadLetterList(ctx, &store.DeadLetterListParams{Namespace: store.DefaultNamespace, OmitPayloads: true})
	require.NoError(t, err)
	require.Len(t, lean, 1)
	require.Nil(t, lean[0].Input)
	require.Nil(t, lean[0].Output)
	want := *full[0]
	want.Input, want.Output = nil, nil
	require.Equal(t, want, *lean[0])
}
