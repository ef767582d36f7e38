package steward

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// eventually polls cond for up to a generous deadline (machines are noisy).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func tc(n int) TraceContext {
	return TraceContext{Traceparent: fmt.Sprintf("00-%032x-%016x-01", n+1, n+1)}
}

func mustGet[K comparable](t *testing.T, q *WorkQueue[K]) Item[K] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it, ok := q.Get(ctx)
	if !ok {
		t.Fatal("Get returned nothing")
	}
	return it
}

func TestAddDedupesAndKeepsContextsInOrder(t *testing.T) {
	q := NewWorkQueue(QueueOptions[string]{})
	defer q.ShutDown()
	q.Add("a", tc(1))
	q.Add("b")
	q.Add("a", tc(2))
	q.Add("a")
	if got := q.Len(); got != 2 {
		t.Fatalf("Len = %d, want 2", got)
	}
	it := mustGet(t, q)
	if it.Key != "a" || len(it.Contexts) != 2 || it.Contexts[0] != tc(1) || it.Contexts[1] != tc(2) {
		t.Fatalf("first item = %+v", it)
	}
	if it := mustGet(t, q); it.Key != "b" || len(it.Contexts) != 0 {
		t.Fatalf("second item = %+v", it)
	}
}

func TestContextsAreCappedAndCounted(t *testing.T) {
	q := NewWorkQueue(QueueOptions[string]{})
	defer q.ShutDown()
	for i := range 40 {
		q.Add("k", tc(i))
	}
	it := mustGet(t, q)
	if len(it.Contexts) != MaxContextsPerItem || it.DroppedContexts != 40-MaxContextsPerItem {
		t.Fatalf("contexts %d dropped %d", len(it.Contexts), it.DroppedContexts)
	}
	if it.Contexts[0] != tc(0) || it.Contexts[31] != tc(31) {
		t.Fatal("the first 32 contexts must be kept, in order")
	}
}

func TestDirtyWhileProcessingIsQueuedOnceAfterDone(t *testing.T) {
	q := NewWorkQueue(QueueOptions[string]{})
	defer q.ShutDown()
	q.Add("k", tc(1))
	it := mustGet(t, q)
	q.Add("k", tc(2))
	q.Add("k", tc(3))
	if _, ok := q.TryGet(); ok {
		t.Fatal("a key being processed must not be handed out again")
	}
	if q.Len() != 0 {
		t.Fatal("a dirty key being processed is not in the queue")
	}
	q.Done(it.Key)
	it = mustGet(t, q)
	if len(it.Contexts) != 2 || it.Contexts[0] != tc(2) {
		t.Fatalf("re-queued item = %+v", it)
	}
	q.Done(it.Key)
	if q.Len() != 0 || q.Processing() != 0 {
		t.Fatal("nothing should be left")
	}
	q.Done("never-got") // does nothing
}

func TestAddAfterKeepsEarliestReadyTimeAndBothContexts(t *testing.T) {
	q := NewWorkQueue(QueueOptions[string]{})
	defer q.ShutDown()
	q.AddAfter("k", time.Hour, tc(1))
	q.AddAfter("k", 10*time.Millisecond, tc(2))
	q.AddAfter("k", 2*time.Hour, tc(3))
	if q.Waiting() != 1 {
		t.Fatalf("Waiting = %d, want 1", q.Waiting())
	}
	it := mustGet(t, q) // blocks until the 10 ms one is ready
	if len(it.Contexts) != 3 {
		t.Fatalf("contexts = %v", it.Contexts)
	}
	q.Done("k")
	if q.Waiting() != 0 {
		t.Fatal("the superseded ready times must not bring the key back")
	}
	q.AddAfter("now", 0)
	if q.Len() != 1 {
		t.Fatal("AddAfter with no delay adds at once")
	}
}

func TestAddAfterOfQueuedKeyCoalesces(t *testing.T) {
	q := NewWorkQueue(QueueOptions[string]{})
	defer q.ShutDown()
	q.Add("k", tc(1))
	q.AddAfter("k", time.Millisecond, tc(2))
	eventually(t, "the delayed add to be promoted", func() bool { return q.Waiting() == 0 })
	if q.Len() != 1 {
		t.Fatalf("Len = %d, want 1", q.Len())
	}
	if it := mustGet(t, q); len(it.Contexts) != 2 {
		t.Fatalf("contexts = %v", it.Contexts)
	}
}

func TestRateLimitedRetriesGrowAndForgetResets(t *testing.T) {
	q := NewWorkQueue(QueueOptions[string]{})
	defer q.ShutDown()
	bo := q.limiter.(MaxOf[string])[0].(*ItemExponentialBackoff[string])
	for range 3 {
		q.AddRateLimited("k")
	}
	if q.NumRequeues("k") != 3 {
		t.Fatalf("NumRequeues = %d", q.NumRequeues("k"))
	}
	if d := bo.When("k"); d != 40*time.Millisecond {
		t.Fatalf("fourth backoff = %s, want 40ms", d)
	}
	q.Forget("k")
	if q.NumRequeues("k") != 0 {
		t.Fatal("Forget must reset the count")
	}
}

func TestShutDownHandsOutTheRestThenStops(t *testing.T) {
	q := NewWorkQueue(QueueOptions[string]{})
	q.Add("a")
	q.AddAfter("later", time.Hour)
	q.ShutDown()
	q.Add("ignored")
	if q.Waiting() != 0 {
		t.Fatal("waiting items are dropped at shutdown")
	}
	if it := mustGet(t, q); it.Key != "a" {
		t.Fatalf("got %v", it.Key)
	}
	if _, ok := q.Get(context.Background()); ok {
		t.Fatal("Get after shutdown and an empty queue must report false")
	}
}

func TestGetIsWokenByShutDownAndCancellation(t *testing.T) {
	q := NewWorkQueue(QueueOptions[string]{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { _, ok := q.Get(ctx); done <- ok }()
	cancel()
	if <-done {
		t.Fatal("a cancelled Get takes nothing")
	}
	go func() { _, ok := q.Get(context.Background()); done <- ok }()
	q.ShutDown()
	if <-done {
		t.Fatal("Get after shutdown takes nothing")
	}
}

func TestShutDownWithDrainWaitsForProcessing(t *testing.T) {
	q := NewWorkQueue(QueueOptions[string]{})
	q.Add("a")
	it := mustGet(t, q)
	drained := make(chan struct{})
	go func() { q.ShutDownWithDrain(context.Background()); close(drained) }()
	eventually(t, "shutdown to start", q.ShuttingDown)
	select {
	case <-drained:
		t.Fatal("drain returned while an item was processing")
	default:
	}
	q.Done(it.Key)
	<-drained
}

// TestConcurrentWorkersNeverShareAKey hammers the queue from many producers and workers
// (run it with -race): no key is ever processed by two workers at once, and every add
// is followed by a processing of its key.
func TestConcurrentWorkersNeverShareAKey(t *testing.T) {
	q := NewWorkQueue(QueueOptions[int]{})
	const keys, producers, adds, workers = 20, 4, 500, 8
	var inFlight [keys]atomic.Int32
	var lastAdd, lastDone [keys]atomic.Int64 // add sequence numbers
	var seq atomic.Int64
	var violations atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				it, ok := q.Get(ctx)
				if !ok {
					return
				}
				if inFlight[it.Key].Add(1) != 1 {
					violations.Add(1)
				}
				seen := seq.Load()
				time.Sleep(time.Microsecond)
				inFlight[it.Key].Add(-1)
				storeMax(&lastDone[it.Key], seen)
				q.Done(it.Key)
			}
		})
	}
	var pw sync.WaitGroup
	for p := range producers {
		pw.Go(func() {
			for i := range adds {
				k := (i*7 + p) % keys
				n := seq.Add(1)
				storeMax(&lastAdd[k], n)
				q.Add(k, tc(i))
			}
		})
	}
	pw.Wait()
	eventually(t, "every key to be processed after its last add", func() bool {
		for k := range keys {
			if lastDone[k].Load() < lastAdd[k].Load() {
				return false
			}
		}
		return q.Len() == 0 && q.Processing() == 0
	})
	cancel()
	q.ShutDown()
	wg.Wait()
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d times a key was processed by two workers at once", v)
	}
}

func storeMax(v *atomic.Int64, n int64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}
