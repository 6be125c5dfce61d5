package history_test

import (
	"fmt"
	"time"

	"github.com/cairnflow/cairn/history"
)

func ExampleReplay() {
	at := time.Date(2026, time.January, 2, 3, 4, 5, 0, time.UTC)
	next := at.Add(10 * time.Second)
	events := []history.Event{
		{Seq: 1, At: at, Data: history.TaskScheduledData{TaskType: "send_invoice", Queue: "default", RunAt: at, MaxAttempts: 3}},
		{Seq: 2, At: at, Attempt: 1, Data: history.AttemptStartedData{WorkerID: "worker-1", LeaseEpoch: 1}},
		{Seq: 3, At: at, Attempt: 1, Data: history.StepCompletedData{Position: 0, Name: "reserve"}},
		{Seq: 4, At: at, Attempt: 1, Data: history.AttemptFailedData{
			Error:     history.ErrorInfo{Class: history.Transient, Message: "connection reset"},
			NextRunAt: &next,
		}},
	}
	s, err := history.Replay(events)
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Status, s.Attempt, len(s.Steps), s.RunAt.Format(time.TimeOnly))

	// An event that cannot follow is refused, naming it.
	_, err = history.Apply(s, history.Event{Seq: 5, At: next, Attempt: 1, Data: history.StepCompletedData{Position: 1, Name: "charge"}})
	fmt.Println(err)
	// Output:
	// retrying 1 1 03:04:15
	// event 5 (step_completed): task is retrying, not running
}

func ExampleEncode() {
	data, err := history.Encode(history.StepCompletedData{Position: 1, Name: "charge", Output: []byte(`{"id":"ch_1"}`)})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(data))

	p, err := history.Decode(history.StepCompleted, data)
	if err != nil {
		panic(err)
	}
	fmt.Println(p.(history.StepCompletedData).Name)

	_, err = history.Decode(history.StepCompleted, []byte(`{"v":2,"position":1}`))
	fmt.Println(err)
	// Output:
	// {"v":1,"position":1,"name":"charge","output":{"id":"ch_1"}}
	// charge
	// decode step_completed payload: unknown schema version 2
}
