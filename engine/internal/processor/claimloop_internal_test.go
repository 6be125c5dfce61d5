package processor

import (
	"testing"
	"time"
)

func TestSkewedDueBacksOffWhileTheDatabaseDisagrees(t *testing.T) {
	t.Parallel()
	began := time.Now()
	poll := time.Second
	future := began.Add(time.Minute)
	at, skew := skewedDue(future, began, 0, poll)
	if !at.Equal(future) || skew != 0 {
		t.Fatalf("a due time ahead of the claim is kept: got %s, skew %s", at, skew)
	}
	past := began.Add(-time.Second)
	var waits []time.Duration
	for range 12 {
		_, skew = skewedDue(past, began, skew, poll)
		waits = append(waits, skew)
	}
	if waits[0] != minClaimWait || waits[1] != 2*minClaimWait || waits[len(waits)-1] != poll {
		t.Fatalf("waits for a past due time double from %s up to the poll %s: %v", minClaimWait, poll, waits)
	}
	if _, skew = skewedDue(future, began, skew, poll); skew != 0 {
		t.Fatalf("a due time the database agrees with resets the backoff: %s", skew)
	}
}

func TestLocalDueKeepsTimesArmedDuringAClaim(t *testing.T) {
	t.Parallel()
	d := newLocalDue()
	first, second := time.Now().Add(time.Second), time.Now().Add(2*time.Second)
	d.arm(first)
	d.begin() // a claim begins: it covers first
	d.arm(second)
	d.seen()
	if got := d.earliest(); !got.Equal(second) {
		t.Fatalf("after the claim, only the time armed during it is left: got %s, want %s", got, second)
	}
	d.begin()
	d.failed() // a failed claim saw nothing
	if got := d.earliest(); !got.Equal(second) {
		t.Fatalf("a failed claim keeps its times: got %s", got)
	}
	d.begin()
	d.seen()
	if got := d.earliest(); !got.IsZero() {
		t.Fatalf("a claim that saw every time leaves none: got %s", got)
	}
}
