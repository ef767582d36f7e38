package tokenbucket

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_000, 0)

func TestBurstGoesAtOnceThenTheRatePaces(t *testing.T) {
	b := New(20, 30, t0)
	for i := range 30 {
		if d := b.Reserve(t0); d != 0 {
			t.Fatalf("token %d of the burst waits %v", i+1, d)
		}
	}
	// 20 a second: the 31st token comes 50 ms later, the 32nd 100 ms later.
	if d := b.Reserve(t0); d != 50*time.Millisecond {
		t.Fatalf("31st waits %v, want 50ms", d)
	}
	if d := b.Reserve(t0); d != 100*time.Millisecond {
		t.Fatalf("32nd waits %v, want 100ms", d)
	}
	if got := b.Tokens(t0); got != -2 {
		t.Fatalf("tokens %v, want -2 (two promised)", got)
	}
}

func TestRefillsAtTheRateUpToTheBurst(t *testing.T) {
	b := New(10, 5, t0)
	for range 5 {
		b.Reserve(t0)
	}
	if got := b.Tokens(t0.Add(300 * time.Millisecond)); got != 3 {
		t.Fatalf("after 300 ms at 10/s: %v tokens, want 3", got)
	}
	if got := b.Tokens(t0.Add(time.Hour)); got != 5 {
		t.Fatalf("after an hour: %v tokens, want the burst, 5", got)
	}
}

func TestAnEarlierReadingAddsNothing(t *testing.T) {
	b := New(10, 1, t0)
	b.Reserve(t0)
	if d := b.Reserve(t0.Add(-time.Second)); d != 100*time.Millisecond {
		t.Fatalf("a reading before the last waits %v, want 100ms", d)
	}
}

func TestCancelGivesTheTokenBack(t *testing.T) {
	b := New(10, 2, t0)
	b.Reserve(t0)
	b.Reserve(t0)
	if d := b.Reserve(t0); d != 100*time.Millisecond {
		t.Fatalf("third waits %v", d)
	}
	b.Cancel(t0)
	if d := b.Reserve(t0); d != 100*time.Millisecond {
		t.Fatalf("after a cancel the next waits %v, want the cancelled one's 100ms", d)
	}
	b.Cancel(t0)
	b.Cancel(t0)
	b.Cancel(t0)
	if got := b.Tokens(t0); got != 2 {
		t.Fatalf("cancels past the burst: %v tokens, want 2", got)
	}
}

func TestNewRefusesUnusableSettings(t *testing.T) {
	for _, c := range []struct {
		rate  float64
		burst int
	}{{0, 1}, {-1, 1}, {1, 0}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%v, %d) did not panic", c.rate, c.burst)
				}
			}()
			New(c.rate, c.burst, t0)
		}()
	}
}
