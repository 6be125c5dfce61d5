package store

import (
	"slices"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
)

// An inquiry is a question a client asks of a task that only a worker
// with the task's code can answer (a query; an update's validator): the
// client writes it ([Executor.InquiryCreate]), a worker that registers the
// task's type and version takes it ([Executor.InquiryTake]), replays the
// task and answers ([Executor.InquiryAnswer]), and the client reads the
// answer ([Executor.InquiryGet]). Notifications wake both sides
// ([Notification.Inquiries], [Notification.Answered]). Inquiries are not
// part of a task's history: maintenance removes them once answered or
// past their deadline ([Executor.InquiryRemoveExpired]).

// The kinds of an inquiry.
const (
	InquiryQuery  = "query"
	InquiryUpdate = "update"
)

// The states of an inquiry.
const (
	InquiryPending  = "pending"
	InquiryAnswered = "answered"
)

// Bounds of an inquiry's fields, checked by every store.
const (
	// MaxInquiryNameBytes bounds an inquiry's name (a query's): 200 bytes.
	MaxInquiryNameBytes = 200
	// MaxInquiryPayloadBytes bounds an inquiry's arguments and its
	// answer as stored, encoded (sealed, say): 2 MiB. The SDK bounds them
	// before encoding, tighter.
	MaxInquiryPayloadBytes = 2 << 20
	// MaxInquiryErrorBytes bounds an answer's error text: 16 KiB.
	MaxInquiryErrorBytes = 16 << 10
	// MaxInquiryTimeout bounds how long an inquiry waits for an answer:
	// 10 minutes.
	MaxInquiryTimeout = 10 * time.Minute
	// MaxInquiryTake bounds the inquiries one take returns: 100.
	MaxInquiryTake = 100
	// MaxInquiryTypes bounds the types one take names: 1,000.
	MaxInquiryTypes = 1000
)

// Inquiry is an inquiry's row.
type Inquiry struct {
	ID          uuid.UUID
	Namespace   string
	TaskID      uuid.UUID
	TaskType    string
	TaskVersion int
	Kind        string // InquiryQuery or InquiryUpdate
	Name        string
	// Args are the arguments as encoded by the SDK's payload stage; nil:
	// none.
	Args  []byte
	State string // InquiryPending or InquiryAnswered
	// Answer, ErrorCode and Error are the answer: Answer (encoded, nil:
	// none) when ErrorCode is "", else the error's code and text.
	Answer    []byte
	ErrorCode string
	Error     string
	// AnsweredBy is the worker that answered.
	AnsweredBy string
	// TakenBy is the worker that took it last, until TakenUntil (zero:
	// never taken).
	TakenBy    string
	TakenUntil time.Time
	CreatedAt  time.Time
	AnsweredAt time.Time // zero while pending
	// Deadline is when the asker stops waiting: a pending inquiry past
	// it is taken no more.
	Deadline time.Time
}

// InquiryCreateParams make an inquiry ([Executor.InquiryCreate]): pending,
// due for an answer within Timeout of now by the store's clock. Workers
// listening hear of it (Notification.Inquiries).
type InquiryCreateParams struct {
	// ID is the inquiry's id, the caller's: an id taken is ErrConflict.
	ID          uuid.UUID
	Namespace   string
	TaskID      uuid.UUID
	TaskType    string
	TaskVersion int
	Kind        string
	Name        string
	Args        []byte
	// Timeout is how long the inquiry may wait for an answer: 1ms to
	// [MaxInquiryTimeout].
	Timeout time.Duration
}

// Validate checks the parameters: what every store does first.
func (p *InquiryCreateParams) Validate() error {
	switch {
	case p == nil || p.ID == uuid.Nil || p.TaskID == uuid.Nil || p.Namespace == "" || p.TaskType == "":
		return errors.New("create inquiry: id, namespace, task and task type are required")
	case p.TaskVersion < 1:
		return errors.Newf("create inquiry: task version %d must be at least 1", p.TaskVersion)
	case p.Kind != InquiryQuery && p.Kind != InquiryUpdate:
		return errors.Newf("create inquiry: kind %q is not %q or %q", p.Kind, InquiryQuery, InquiryUpdate)
	case p.Name == "" || len(p.Name) > MaxInquiryNameBytes || !validText(p.Name):
		return errors.Newf("create inquiry: a name is 1 to %d bytes of UTF-8 without NUL", MaxInquiryNameBytes)
	case len(p.Args) > MaxInquiryPayloadBytes:
		return errors.Newf("create inquiry: arguments of %d bytes are over the bound of %d", len(p.Args), MaxInquiryPayloadBytes)
	case p.Timeout < time.Millisecond || p.Timeout > MaxInquiryTimeout:
		return errors.Newf("create inquiry: timeout %s is outside 1ms..%s", p.Timeout, MaxInquiryTimeout)
	}
	return nil
}

// InquiryTakeParams take pending inquiries for a worker
// ([Executor.InquiryTake]): up to Max of Namespace's, of the Types (and
// Kinds) it answers, not past their deadline, not held by another
// worker's take (a take holds an inquiry for Lease: if its worker dies,
// another takes it then), oldest first; each is held for Owner until
// Lease from now. On PostgreSQL, concurrent takes skip each other's rows
// (FOR UPDATE SKIP LOCKED).
type InquiryTakeParams struct {
	Namespace string
	Types     []TypeKey
	// Kinds are the kinds taken; none: every kind.
	Kinds []string
	Owner string
	// Max: 1 to [MaxInquiryTake].
	Max int
	// Lease: 1ms to [MaxInquiryTimeout].
	Lease time.Duration
}

// Validate checks the parameters: what every store does first.
func (p *InquiryTakeParams) Validate() error {
	switch {
	case p == nil || p.Namespace == "" || p.Owner == "":
		return errors.New("take inquiries: namespace and owner are required")
	case len(p.Types) == 0 || len(p.Types) > MaxInquiryTypes:
		return errors.Newf("take inquiries: 1 to %d types, not %d", MaxInquiryTypes, len(p.Types))
	case p.Max < 1 || p.Max > MaxInquiryTake:
		return errors.Newf("take inquiries: max %d is outside 1..%d", p.Max, MaxInquiryTake)
	case p.Lease < time.Millisecond || p.Lease > MaxInquiryTimeout:
		return errors.Newf("take inquiries: lease %s is outside 1ms..%s", p.Lease, MaxInquiryTimeout)
	}
	for _, k := range p.Kinds {
		if k != InquiryQuery && k != InquiryUpdate {
			return errors.Newf("take inquiries: kind %q is not %q or %q", k, InquiryQuery, InquiryUpdate)
		}
	}
	return nil
}

// TakeKinds is the kinds p takes: p.Kinds, or every kind (for drivers).
func (p *InquiryTakeParams) TakeKinds() []string {
	if len(p.Kinds) == 0 {
		return []string{InquiryQuery, InquiryUpdate}
	}
	return slices.Clone(p.Kinds)
}

// InquiryAnswerParams answer a pending inquiry ([Executor.InquiryAnswer]):
// with Answer (encoded) when ErrorCode is "", else with the error. An
// inquiry not pending in Namespace (answered already, removed, never
// made) is [ErrNotFound]; one past its deadline still takes the answer.
// The asker listening hears of it (Notification.Answered).
type InquiryAnswerParams struct {
	ID        uuid.UUID
	Namespace string
	Owner     string
	Answer    []byte
	ErrorCode string
	Error     string
}

// Validate checks the parameters: what every store does first.
func (p *InquiryAnswerParams) Validate() error {
	switch {
	case p == nil || p.ID == uuid.Nil || p.Namespace == "" || p.Owner == "":
		return errors.New("answer inquiry: id, namespace and owner are required")
	case len(p.Answer) > MaxInquiryPayloadBytes:
		return errors.Newf("answer inquiry %s: an answer of %d bytes is over the bound of %d", p.ID, len(p.Answer), MaxInquiryPayloadBytes)
	case len(p.Error) > MaxInquiryErrorBytes || !validText(p.Error) || len(p.ErrorCode) > MaxInquiryNameBytes || !validText(p.ErrorCode):
		return errors.Newf("answer inquiry %s: an error code is at most %d bytes, its text %d, of UTF-8 without NUL",
			p.ID, MaxInquiryNameBytes, MaxInquiryErrorBytes)
	case p.ErrorCode == "" && p.Error != "":
		return errors.Newf("answer inquiry %s: an error needs a code", p.ID)
	}
	return nil
}

// InquiryGetParams read an inquiry of Namespace ([Executor.InquiryGet]);
// none is [ErrNotFound].
type InquiryGetParams struct {
	ID        uuid.UUID
	Namespace string
}

// Validate checks the parameters: what every store does first.
func (p *InquiryGetParams) Validate() error {
	if p == nil || p.ID == uuid.Nil || p.Namespace == "" {
		return errors.New("get inquiry: id and namespace are required")
	}
	return nil
}

// MaxInquiryRemove bounds [InquiryRemoveExpiredParams.Max]: 10,000.
const MaxInquiryRemove = 10_000

// InquiryRemoveExpiredParams remove, in every namespace, up to Max
// inquiries answered more than Keep ago, or still pending more than Keep
// past their deadline, by the store's clock
// ([Executor.InquiryRemoveExpired]).
type InquiryRemoveExpiredParams struct {
	Keep time.Duration // 0 or more
	Max  int           // 1 to MaxInquiryRemove
}

// Validate checks the parameters: what every store does first.
func (p *InquiryRemoveExpiredParams) Validate() error {
	switch {
	case p == nil || p.Keep < 0:
		return errors.New("remove inquiries: keep must not be negative")
	case p.Max < 1 || p.Max > MaxInquiryRemove:
		return errors.Newf("remove inquiries: max %d is outside 1..%d", p.Max, MaxInquiryRemove)
	}
	return nil
}
