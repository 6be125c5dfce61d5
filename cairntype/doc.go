// Package cairntype holds the values cairn hands back to its users, as
// River's rivertype does: a queue's settings, load and flow ([QueueInfo],
// [QueueWait], [QueueStats], [QueueSeries]), why a queue grows
// ([QueueDiagnosis] and its [DiagnosisCause]s), cron schedules
// ([Schedule]), a namespace's settings ([NamespaceConfig]), what tasks
// spent on AI models ([TaskUsage], [UsageSeries]), the task types
// workers registered ([TaskType]), and the errors a request may end with
// ([ErrNotFound], [ErrTaskState], [*QueueFullError], [*HistoryFullError],
// ...). Package sdk returns them, the HTTP API serves them, and the store
// seam (engine/store) reads them from the database, so they sit in a leaf
// that all of them import.
//
// A task as a client sees it is sdk.TaskInfo: the sdk builds it from the
// task's row and history, and nothing below the sdk makes one.
//
// The package may import history (usage reports are its [history.Usage]).
package cairntype
