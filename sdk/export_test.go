package sdk

// AbandonWorker stops w as a crash would: its attempts are cancelled and
// nothing more is written for them, so their tasks wait for their leases to
// expire. Tests of crash recovery use it; Start's context no longer does
// this (it stops gracefully).
func AbandonWorker(w *Worker) {
	w.mu.Lock()
	abandon := w.abandon
	w.mu.Unlock()
	if abandon != nil {
		abandon()
	}
}
