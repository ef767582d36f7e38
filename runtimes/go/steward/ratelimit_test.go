package steward

import (
	"testing"
	"time"
)

func TestItemExponentialBackoff(t *testing.T) {
	b := NewItemExponentialBackoff[string](5*time.Millisecond, 1000*time.Second)
	want := []time.Duration{5, 10, 20, 40, 80}
	for i, w := range want {
		if d := b.When("k"); d != w*time.Millisecond {
			t.Fatalf("retry %d: %s, want %s", i, d, w*time.Millisecond)
		}
	}
	for range 40 {
		b.When("k")
	}
	if d := b.When("k"); d != 1000*time.Second {
		t.Fatalf("capped delay = %s", d)
	}
	if b.NumRequeues("k") != 46 || b.NumRequeues("other") != 0 {
		t.Fatalf("NumRequeues = %d", b.NumRequeues("k"))
	}
	b.Forget("k")
	if d := b.When("k"); d != 5*time.Millisecond {
		t.Fatalf("after Forget: %s", d)
	}
}

func TestTokenBucketReservesAfterTheBurst(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	b := NewTokenBucket[string](10, 100, clock)
	for i := range 100 {
		if d := b.When("x"); d != 0 {
			t.Fatalf("call %d in the burst waited %s", i, d)
		}
	}
	if d := b.When("x"); d != 100*time.Millisecond {
		t.Fatalf("101st waits %s, want 100ms", d)
	}
	if d := b.When("x"); d != 200*time.Millisecond {
		t.Fatalf("102nd waits %s, want 200ms", d)
	}
	now = now.Add(time.Second) // ten tokens later: the two reservations are paid, 8 left
	for range 8 {
		if d := b.When("x"); d != 0 {
			t.Fatalf("refilled token waited %s", d)
		}
	}
	if d := b.When("x"); d <= 0 {
		t.Fatal("the bucket should be empty again")
	}
}

func TestDefaultControllerRateLimiterIsTheMaximum(t *testing.T) {
	l := DefaultControllerRateLimiter[string]()
	if d := l.When("a"); d != 5*time.Millisecond {
		t.Fatalf("first delay %s", d)
	}
	if l.NumRequeues("a") != 1 {
		t.Fatal("the backoff counts the retry")
	}
	l.Forget("a")
	if l.NumRequeues("a") != 0 {
		t.Fatal("Forget reaches every limiter")
	}
}
