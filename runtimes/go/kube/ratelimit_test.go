package kube_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/steward-dev/steward/runtimes/go/kube"
)

// fakeClock is a clock that moves only when the rate limiter sleeps on it: a sleep is
// recorded and advances the clock by its length at once.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
	during func() error // called in each sleep, after the clock moved; its error ends the sleep
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) sleep(_ context.Context, d time.Duration) error {
	f.mu.Lock()
	f.sleeps = append(f.sleeps, d)
	f.now = f.now.Add(d)
	during := f.during
	f.mu.Unlock()
	if during != nil {
		return during()
	}
	return nil
}

func (f *fakeClock) slept() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sleeps)
}

func limitedClient(t *testing.T, a *arrivals, qps float64, burst int) (*kube.Client, *fakeClock) {
	t.Helper()
	c := kube.NewClient(&kube.Config{Server: a.srv.URL, QPS: qps, Burst: burst}, "steward-test")
	clock := &fakeClock{now: time.Now()}
	kube.SetRateLimiterClock(c, clock.Now, clock.sleep)
	return c, clock
}

func TestRateLimitLetsTheBurstGoThenPacesAtQPS(t *testing.T) {
	a := newArrivals(t)
	c, clock := limitedClient(t, a, 10, 3)
	if !c.RateLimited() {
		t.Fatal("QPS 10: not rate limited")
	}
	ctx := context.Background()
	for range 5 {
		if err := c.Do(ctx, "GET", cmPath, "", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The burst of 3 goes at once; at 10 a second each further request waits 100 ms.
	if got, want := clock.slept(), []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}; !slices.Equal(got, want) {
		t.Fatalf("slept %v, want %v", got, want)
	}
	if n := len(a.requests()); n != 5 {
		t.Fatalf("%d requests arrived, want 5", n)
	}
	// Later, refilled: the bucket holds 3 again (after 300 ms) and they go at once.
	clock.mu.Lock()
	clock.now = clock.now.Add(300 * time.Millisecond)
	clock.mu.Unlock()
	for range 3 {
		if err := c.MergePatch(ctx, cmPath, map[string]any{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(clock.slept()); n != 2 {
		t.Fatalf("after a refill the burst slept: %v", clock.slept())
	}

	u, _ := url.Parse(a.srv.URL)
	waits := c.RateLimiterWaits()
	if len(waits) != 2 || waits[0].Verb != "GET" || waits[1].Verb != "PATCH" {
		t.Fatalf("waits by verb: %+v, want GET and PATCH", waits)
	}
	get := waits[0]
	if get.Host != u.Host || get.Count != 5 || get.Sum < 0.199 || get.Sum > 0.201 {
		t.Fatalf("GET waits: host %q count %d sum %v, want %q, 5, 0.2", get.Host, get.Count, get.Sum, u.Host)
	}
	// Cumulative buckets: three waits of 0 s, two of 0.1 s (le 0.1 holds all five).
	if get.Bounds[0] != 0.005 || get.Counts[0] != 3 || get.Counts[1] != 3 || get.Counts[2] != 5 || get.Counts[len(get.Counts)-1] != 5 {
		t.Fatalf("GET buckets %v over %v", get.Counts, get.Bounds)
	}
	if patch := waits[1]; patch.Count != 3 || patch.Sum != 0 {
		t.Fatalf("PATCH waits %+v, want 3 of 0 s", patch)
	}
}

func TestNoQPSMeansNoLimit(t *testing.T) {
	a := newArrivals(t)
	for _, qps := range []float64{0, -1} {
		c := kube.NewClient(&kube.Config{Server: a.srv.URL, QPS: qps}, "steward-test")
		if c.RateLimited() {
			t.Fatalf("QPS %v: rate limited", qps)
		}
		for range 50 {
			if err := c.Do(context.Background(), "GET", cmPath, "", nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		if w := c.RateLimiterWaits(); w != nil {
			t.Fatalf("QPS %v: waits %v, want none", qps, w)
		}
	}
}

func TestAWaitTheContextEndsSendsNothingAndGivesTheTokenBack(t *testing.T) {
	a := newArrivals(t)
	c, clock := limitedClient(t, a, 10, 1)
	ctx := context.Background()
	if err := c.Do(ctx, "GET", cmPath, "", nil, nil); err != nil {
		t.Fatal(err)
	}
	clock.during = func() error { return context.Canceled }
	err := c.Do(ctx, "GET", cmPath, "", nil, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a wait cancelled: %v, want context.Canceled", err)
	}
	if n := len(a.requests()); n != 1 {
		t.Fatalf("%d requests arrived, want only the first", n)
	}
	// The clock moved 100 ms during the cancelled wait, and its token came back: the next
	// request finds the one that came in meanwhile, without waiting.
	clock.during = nil
	if err := c.Do(ctx, "GET", cmPath, "", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := clock.slept(); len(got) != 1 {
		t.Fatalf("slept %v: the request after a cancelled wait waited again", got)
	}
}

func TestAWaitPastTheDeadlineFailsAtOnce(t *testing.T) {
	a := newArrivals(t)
	c, clock := limitedClient(t, a, 1, 1)
	if err := c.Do(context.Background(), "GET", cmPath, "", nil, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(10*time.Millisecond))
	defer cancel()
	err := c.Do(ctx, "GET", cmPath, "", nil, nil) // the next token is 1 s away
	if err == nil {
		t.Fatal("a wait of 1 s under a deadline 10 ms away succeeded")
	}
	if got := clock.slept(); len(got) != 0 {
		t.Fatalf("slept %v, want no sleep at all", got)
	}
	if n := len(a.requests()); n != 1 {
		t.Fatalf("%d requests arrived, want only the first", n)
	}
}

func TestTheFenceIsAskedAfterTheWait(t *testing.T) {
	a := newArrivals(t)
	var holds atomic.Bool
	holds.Store(true)
	c := kube.NewFencedClient(&kube.Config{Server: a.srv.URL, QPS: 10, Burst: 1}, "steward-test", holds.Load)
	clock := &fakeClock{now: time.Now()}
	kube.SetRateLimiterClock(c, clock.Now, clock.sleep)
	ctx := context.Background()
	if err := c.MergePatch(ctx, cmPath, map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	clock.during = func() error { holds.Store(false); return nil } // the lease is lost while it waits
	if err := c.MergePatch(ctx, cmPath, map[string]any{}, nil); !kube.IsFenced(err) {
		t.Fatalf("a write whose lease went while it waited for a token: %v, want fenced", err)
	}
	if n := len(a.requests()); n != 1 {
		t.Fatalf("%d requests arrived, want only the first", n)
	}
}

func TestABurstBelowOneWithAQPSPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("QPS 5, Burst 0: no panic")
		}
	}()
	kube.NewClient(&kube.Config{Server: "https://127.0.0.1:1", QPS: 5, Burst: 0}, "steward-test")
}
