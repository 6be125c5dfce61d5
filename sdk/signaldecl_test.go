package sdk_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"

	"github.com/cairnflow/cairn/engine/enginetest"
	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/workflow"
)

// note is a declared signal's payload: one field required, the others not
// (omitempty), or nullable (a nil slice or pointer Go writes as null).
type note struct {
	Text   string   `json:"text"`
	Tags   []string `json:"tags"`
	Parent *note    `json:"parent"`
	Score  int      `json:"score,omitempty"`
}

// declaredReview waits for the approval "approval" at version 1, which
// declares it and "note"; version 2 of the same type declares nothing.
func declaredReview(version int) *sdk.Workflow[struct{}, workflow.Decision] {
	var opts *sdk.WorkflowOpts
	if version == 1 {
		opts = &sdk.WorkflowOpts{Signals: []sdk.SignalDecl{sdk.DeclareApproval("approval"), sdk.DeclareSignal[note]("note")}}
	}
	return sdk.NewWorkflow("review.declared", version, func(ctx workflow.Context, _ struct{}) (workflow.Decision, error) {
		d, _, err := workflow.AwaitApproval(ctx, "approval", time.Hour)
		return d, err
	}, opts)
}

// A task whose type declares its signals refuses, when they are sent and
// with nothing written, a signal of a name it does not declare and a
// payload that does not fit; a declared signal with a good payload goes
// through; the type's other version, which declares nothing, takes any
// signal as before. On both stores, by id and by idempotency key.
func TestDeclaredSignalsAreCheckedWhenSent(t *testing.T) {
	t.Parallel()
	onEachStore(t, func(t *testing.T, setup setupFunc) {
		b := setup(t, sdk.WorkerConfig{})
		v1, v2 := declaredReview(1), declaredReview(2)
		sdk.Register(b.worker, v1)
		sdk.Register(b.worker, v2)
		startWorker(t, b.worker)
		ctx := context.Background()
		run, err := sdk.Start(ctx, b.client, v1, struct{}{}, &sdk.StartOpts{IdempotencyKey: "declared-1"})
		require.NoError(t, err)
		waitForEvent(t, b.client, run.ID, history.WaitStarted)
		before := taskHistory(t, b.client, run.ID)

		_, err = b.client.Signal(ctx, run.ID, "aproval", json.RawMessage(`{"approved":true}`), nil)
		var notDeclared *sdk.SignalNotDeclaredError
		require.ErrorAs(t, err, &notDeclared)
		require.ErrorIs(t, err, sdk.ErrInvalid)
		require.Equal(t, []string{"approval", "note"}, notDeclared.Declared)
		require.Equal(t, "review.declared", notDeclared.Type)
		require.Equal(t, 1, notDeclared.Version)
		require.Contains(t, err.Error(), `declares: "approval", "note"`)

		for _, c := range []struct {
			payload any
			want    []sdk.SignalPayloadProblem
		}{
			{json.RawMessage(`{"payload":{"ok":"yes"}}`), []sdk.SignalPayloadProblem{{Pointer: "/approved", Detail: "missing"}}},
			{json.RawMessage(`{"ok":"yes"}`), []sdk.SignalPayloadProblem{{Pointer: "/approved", Detail: "missing"}}},
			{json.RawMessage(`{"approved":"yes"}`), []sdk.SignalPayloadProblem{{Pointer: "/approved", Detail: "got string, want boolean"}}},
			{true, []sdk.SignalPayloadProblem{{Pointer: "", Detail: "got boolean, want object"}}},
			{nil, []sdk.SignalPayloadProblem{{Pointer: "", Detail: "got null, want object"}}},
		} {
			_, err = b.client.Signal(ctx, run.ID, "approval", c.payload, nil)
			var bad *sdk.SignalPayloadError
			require.ErrorAs(t, err, &bad, "payload %v", c.payload)
			require.ErrorIs(t, err, sdk.ErrInvalid)
			require.Equal(t, c.want, bad.Problems, "payload %s", c.payload)
		}
		_, err = b.client.SignalByKey(ctx, "declared-1", "approval", json.RawMessage(`{"ok":"yes"}`), nil)
		require.ErrorAs(t, err, new(*sdk.SignalPayloadError))
		_, err = b.client.SignalByKey(ctx, "declared-1", "aproval", nil, nil)
		require.ErrorAs(t, err, new(*sdk.SignalNotDeclaredError))

		_, err = b.client.Signal(ctx, run.ID, "note", note{Text: "nil tags and parent are null"}, nil)
		require.NoError(t, err, "a Go value of the declared type fits")
		_, err = b.client.Signal(ctx, run.ID, "note", json.RawMessage(`{"text":"x","parent":{"text":1}}`), nil)
		var bad *sdk.SignalPayloadError
		require.ErrorAs(t, err, &bad)
		require.Equal(t, []sdk.SignalPayloadProblem{{Pointer: "/parent/text", Detail: "got number, want string"}}, bad.Problems)

		after := taskHistory(t, b.client, run.ID)
		require.Len(t, after, len(before)+1, "only the good note was written")
		require.Equal(t, "note", eventsOf[history.SignalReceivedData](after)[0].Name)

		_, err = b.client.Signal(ctx, run.ID, "approval", workflow.Decision{Approved: true, Comment: "fine"}, nil)
		require.NoError(t, err)
		info := waitTask(t, b.client, run.ID)
		require.Equal(t, history.StatusCompleted, info.Status, "last error: %+v", info.LastError)

		// Version 2 declares nothing: today's behaviour, a misspelled
		// name is taken (and waits for a receive that never comes).
		run2, err := sdk.Start(ctx, b.client, v2, struct{}{}, nil)
		require.NoError(t, err)
		waitForEvent(t, b.client, run2.ID, history.WaitStarted) // then nothing more is written: no attempt runs
		_, err = b.client.Signal(ctx, run2.ID, "aproval", json.RawMessage(`{"ok":"yes"}`), nil)
		require.NoError(t, err)
		enginetest.RequireProjectionsMatch(t, sdk.ClientStore(b.client))
	})
}

// The payload schemas made from Go types take what encoding/json writes
// of the type, and refuse what lacks a field it requires.
func TestDeclaredPayloadSchemas(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		decl    sdk.SignalDecl
		payload string
		ok      bool
	}{
		{"approval", sdk.DeclareApproval("a"), `{"approved":false}`, true},
		{"approval with extras", sdk.DeclareApproval("a"), `{"approved":true,"comment":"c","ticket":7}`, true},
		{"approval missing", sdk.DeclareApproval("a"), `{"comment":"c"}`, false},
		{"bool", sdk.DeclareSignal[bool]("b"), `true`, true},
		{"bool as string", sdk.DeclareSignal[bool]("b"), `"true"`, false},
		{"any", sdk.DeclareSignal[any]("x"), ``, true},
		{"any object", sdk.DeclareSignal[any]("x"), `{"k":[1]}`, true},
		{"pointer nil", sdk.DeclareSignal[*note]("n"), `null`, true},
		{"struct null", sdk.DeclareSignal[note]("n"), `null`, false},
		{"nil slice", sdk.DeclareSignal[note]("n"), `{"text":"t","tags":null,"parent":null}`, true},
		{"nullable absent", sdk.DeclareSignal[note]("n"), `{"text":"t"}`, true},
		{"required absent", sdk.DeclareSignal[note]("n"), `{"tags":[]}`, false},
		{"slice of wrong", sdk.DeclareSignal[note]("n"), `{"text":"t","tags":[1]}`, false},
		{"map", sdk.DeclareSignal[map[string]int]("m"), `{"a":1}`, true},
		{"map wrong", sdk.DeclareSignal[map[string]int]("m"), `{"a":"1"}`, false},
		{"schema", sdk.DeclareSignalSchema("s", json.RawMessage(`{"type":"integer","minimum":1}`)), `0`, false},
	} {
		_, err := sdk.CheckSignalPayload(c.decl, json.RawMessage(c.payload))
		if c.ok {
			require.NoError(t, err, c.name)
		} else {
			require.Error(t, err, c.name)
		}
	}
}

// What cannot be declared fails the workflow's definition.
func TestSignalDeclarationRefusals(t *testing.T) {
	t.Parallel()
	fn := func(workflow.Context, struct{}) (int, error) { return 0, nil }
	tooMany := make([]sdk.SignalDecl, sdk.MaxDeclaredSignals+1)
	for i := range tooMany {
		tooMany[i] = sdk.DeclareSignal[int]("s" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	for name, decls := range map[string][]sdk.SignalDecl{
		"twice":       {sdk.DeclareApproval("a"), sdk.DeclareSignal[int]("a")},
		"no name":     {sdk.DeclareSignal[int]("")},
		"channel":     {sdk.DeclareSignal[chan int]("c")},
		"bad schema":  {sdk.DeclareSignalSchema("s", json.RawMessage(`{"type":12}`))},
		"not JSON":    {sdk.DeclareSignalSchema("s", json.RawMessage(`{`))},
		"remote ref":  {sdk.DeclareSignalSchema("s", json.RawMessage(`{"$ref":"https://example.com/s.json"}`))},
		"too many":    tooMany,
		"control chr": {sdk.DeclareSignal[int]("a\nb")},
	} {
		_, err := sdk.NewWorkflowSafely("declared.bad", 1, fn, &sdk.WorkflowOpts{Signals: decls})
		require.Error(t, err, name)
		require.True(t, errors.Is(err, sdk.ErrInvalid), name)
	}
	_, err := sdk.NewWorkflowSafely("declared.none", 1, fn, &sdk.WorkflowOpts{Signals: []sdk.SignalDecl{}})
	require.NoError(t, err, "declaring none: every signal refused")
}
