package cairntype

import (
	"encoding/json"
	"time"
)

// Schedule is a cron schedule as a client lists it: at each tick, the
// leader starts a task of TaskType with Input. Ticks missed while no
// leader ran (or while paused) are not made up: the policy is "run the
// latest once" — one task for the latest missed tick, then on schedule
// again.
//
// A tick whose start its queue refused as full is skipped, not lost at
// once: the schedule is tried again at RetryAt (the queue's retry-after
// hint, or the next tick if that comes first) and then fires its latest
// tick, as after missed ticks. Other schedules fire meanwhile.
//
// It is the store's row as well: engine/store's Schedule is this type.
type Schedule struct {
	Namespace   string
	Name        string
	Cron        string // five fields (minute first), an optional leading seconds field, or a descriptor (@hourly)
	Timezone    string // IANA name; default UTC
	TaskType    string
	TypeVersion int
	Queue       string
	Input       json.RawMessage
	MaxAttempts int
	Paused      bool
	NextRunAt   time.Time  // the next tick that will fire; while skipped, the tick the queue refused
	LastTick    *time.Time // the last tick fired
	// RetryAt is set while the schedule is skipped: its last tick was
	// refused (LastSkipReason), and it is tried again at RetryAt.
	RetryAt        *time.Time
	LastSkippedAt  *time.Time // when a tick was last skipped; kept after the schedule fires again
	LastSkipReason string     // why: ScheduleSkipQueueFull or ScheduleSkipStartFailed; "" if no tick was ever skipped
}

// ScheduleSkipQueueFull is the reason of a tick skipped because its queue
// was full (the start failed with ErrQueueFull).
const ScheduleSkipQueueFull = "queue_full"

// ScheduleSkipStartFailed is the reason of a tick skipped because its
// task could not be started for another reason than a full queue (its
// idempotency key taken by another input, say): the schedule is tried
// again at its next tick or a minute later, whichever is first, so one
// broken schedule neither spins the leader nor holds the others.
const ScheduleSkipStartFailed = "start_failed"
