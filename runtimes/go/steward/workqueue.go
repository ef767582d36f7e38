package steward

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// MaxContextsPerItem is how many trace contexts a queued item keeps by default; later
// ones are only counted (Item.DroppedContexts).
const MaxContextsPerItem = 32

// TraceContext is the W3C trace context (traceparent and tracestate headers) of one
// event, as the informer sends it.
type TraceContext struct {
	Traceparent string
	Tracestate  string
}

// Item is what WorkQueue.Get hands out: the key and the trace contexts of every add it
// absorbed, in order (at most the queue's limit; DroppedContexts counts the rest).
// QueuedAt is when the key became ready in the queue, DequeuedAt when it was handed out.
type Item[K comparable] struct {
	Key             K
	Contexts        []TraceContext
	DroppedContexts int
	QueuedAt        time.Time
	DequeuedAt      time.Time
}

type contextBag struct {
	items    []TraceContext
	dropped  int
	queuedAt time.Time
}

func (b *contextBag) extend(contexts []TraceContext, limit int) {
	for _, c := range contexts {
		if len(b.items) < limit {
			b.items = append(b.items, c)
		} else {
			b.dropped++
		}
	}
}

type waitingItem[K comparable] struct {
	readyAt  time.Time
	seq      uint64
	contexts contextBag
}

type heapEntry[K comparable] struct {
	readyAt time.Time
	seq     uint64
	key     K
}

type waitHeap[K comparable] []heapEntry[K]

func (h waitHeap[K]) Len() int { return len(h) }
func (h waitHeap[K]) Less(i, j int) bool {
	if h[i].readyAt.Equal(h[j].readyAt) {
		return h[i].seq < h[j].seq
	}
	return h[i].readyAt.Before(h[j].readyAt)
}
func (h waitHeap[K]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *waitHeap[K]) Push(x any)   { *h = append(*h, x.(heapEntry[K])) }
func (h *waitHeap[K]) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// QueueOptions configure a WorkQueue. The zero value works.
type QueueOptions[K comparable] struct {
	// RateLimiter times AddRateLimited. Defaults to DefaultControllerRateLimiter.
	RateLimiter RateLimiter[K]
	// MaxContexts bounds the trace contexts kept per item. Defaults to MaxContextsPerItem.
	MaxContexts int
	// Name labels the queue's metrics (workqueue_*{name="..."}). Defaults to "": an
	// unnamed queue records none.
	Name string
	// Metrics is where a named queue reports. Defaults to DefaultMetrics.
	Metrics *Metrics
}

// WorkQueue is a rate-limited, delaying work queue with client-go's semantics, keeping
// the trace contexts of the events coalesced into each key:
//
//   - an item already queued (dirty) is not queued twice; the adds coalesce, and so do
//     their trace contexts;
//   - an item is never handed out twice at once: added while being processed, it is
//     marked dirty and queued again when Done is called for it;
//   - AddAfter holds an item until its ready time; for an item already waiting, the
//     earliest ready time wins (the contexts of both adds are kept);
//   - AddRateLimited waits as long as the rate limiter says; Forget clears the item's
//     history there;
//   - after ShutDown, adds are ignored and waiting items are dropped; Get still hands
//     out what is queued, then reports false for ever.
//
// A named queue reports client-go's work queue metrics (see Metrics): adds, depth, time
// queued, time processed, retries, and the work in progress; its depth and work in
// progress stop counting once it has shut down and nothing is being processed.
//
// It is safe for concurrent use. A goroutine moves delayed items to the queue when they
// are ready; it ends with ShutDown.
type WorkQueue[K comparable] struct {
	limiter     RateLimiter[K]
	maxContexts int
	metrics     *queueMetrics // nil: unnamed, records nothing

	mu           sync.Mutex
	queue        []K
	dirty        map[K]*contextBag
	processing   map[K]struct{}
	waiting      map[K]*waitingItem[K]
	heap         waitHeap[K]
	seq          uint64
	shuttingDown bool
	drain        bool
	changed      chan struct{} // closed (and replaced) whenever getters or drainers may proceed

	wake    chan struct{}
	stopped chan struct{}
}

// NewWorkQueue returns a running queue; call ShutDown when done with it.
func NewWorkQueue[K comparable](opts QueueOptions[K]) *WorkQueue[K] {
	q := &WorkQueue[K]{
		limiter:     opts.RateLimiter,
		maxContexts: opts.MaxContexts,
		dirty:       map[K]*contextBag{},
		processing:  map[K]struct{}{},
		waiting:     map[K]*waitingItem[K]{},
		changed:     make(chan struct{}),
		wake:        make(chan struct{}, 1),
		stopped:     make(chan struct{}),
	}
	if q.limiter == nil {
		q.limiter = DefaultControllerRateLimiter[K]()
	}
	if q.maxContexts <= 0 {
		q.maxContexts = MaxContextsPerItem
	}
	if opts.Name != "" {
		q.metrics = opts.Metrics.orDefault().queue(opts.Name)
	}
	go q.delayLoop()
	return q
}

// Add queues item unless it is already queued, keeping its trace contexts. An item being
// processed is queued again when Done is called for it. Ignored after shutdown.
func (q *WorkQueue[K]) Add(item K, contexts ...TraceContext) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shuttingDown {
		return
	}
	q.add(item, contexts, 0)
}

func (q *WorkQueue[K]) add(item K, contexts []TraceContext, dropped int) {
	if bag, ok := q.dirty[item]; ok {
		bag.extend(contexts, q.maxContexts)
		bag.dropped += dropped
		return
	}
	q.metrics.add(item)
	bag := &contextBag{queuedAt: time.Now(), dropped: dropped}
	bag.extend(contexts, q.maxContexts)
	q.dirty[item] = bag
	if _, busy := q.processing[item]; busy {
		return
	}
	q.queue = append(q.queue, item)
	q.broadcast()
}

// AddAfter adds item once delay has passed (at once when delay <= 0). An item already
// waiting keeps the earlier ready time. Ignored after shutdown.
func (q *WorkQueue[K]) AddAfter(item K, delay time.Duration, contexts ...TraceContext) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addAfter(item, delay, contexts)
}

func (q *WorkQueue[K]) addAfter(item K, delay time.Duration, contexts []TraceContext) {
	if q.shuttingDown {
		return
	}
	q.metrics.retry()
	if delay <= 0 {
		q.add(item, contexts, 0)
		return
	}
	readyAt := time.Now().Add(delay)
	w, ok := q.waiting[item]
	switch {
	case !ok:
		q.seq++
		w = &waitingItem[K]{readyAt: readyAt, seq: q.seq}
		q.waiting[item] = w
		heap.Push(&q.heap, heapEntry[K]{readyAt, w.seq, item})
	case readyAt.Before(w.readyAt):
		q.seq++
		w.readyAt, w.seq = readyAt, q.seq
		heap.Push(&q.heap, heapEntry[K]{readyAt, w.seq, item})
	}
	w.contexts.extend(contexts, q.maxContexts)
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// AddRateLimited adds item after the delay the rate limiter gives it (which counts a
// requeue). Ignored after shutdown.
func (q *WorkQueue[K]) AddRateLimited(item K, contexts ...TraceContext) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shuttingDown {
		return
	}
	q.addAfter(item, q.limiter.When(item), contexts)
}

// Forget tells the rate limiter the item is done with retries; its backoff starts over.
// It does not remove the item from the queue.
func (q *WorkQueue[K]) Forget(item K) { q.limiter.Forget(item) }

// NumRequeues is how many rate-limited requeues the item had since it was forgotten.
func (q *WorkQueue[K]) NumRequeues(item K) int { return q.limiter.NumRequeues(item) }

// TryGet hands out the next ready item, or reports false when none is ready. The caller
// must call Done with the key when finished with it.
func (q *WorkQueue[K]) TryGet() (Item[K], bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pop()
}

func (q *WorkQueue[K]) pop() (Item[K], bool) {
	q.promoteReady()
	if len(q.queue) == 0 {
		return Item[K]{}, false
	}
	key := q.queue[0]
	var zero K
	q.queue[0] = zero
	q.queue = q.queue[1:]
	q.metrics.get(key)
	q.processing[key] = struct{}{}
	bag := q.dirty[key]
	delete(q.dirty, key)
	return Item[K]{
		Key: key, Contexts: bag.items, DroppedContexts: bag.dropped,
		QueuedAt: bag.queuedAt, DequeuedAt: time.Now(),
	}, true
}

// Get waits for the next item and hands it out. It reports false when the queue has
// shut down (after what was still queued has been handed out) or ctx is done; then
// nothing was taken. The caller must call Done with the key when finished with it.
func (q *WorkQueue[K]) Get(ctx context.Context) (Item[K], bool) {
	for {
		q.mu.Lock()
		if it, ok := q.pop(); ok {
			q.mu.Unlock()
			return it, true
		}
		if q.shuttingDown {
			q.mu.Unlock()
			return Item[K]{}, false
		}
		changed := q.changed
		q.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return Item[K]{}, false
		}
	}
}

// Done marks item finished; if it was added meanwhile, it is queued again now. Calling
// it for an item that is not being processed does nothing.
func (q *WorkQueue[K]) Done(item K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.processing[item]; !ok {
		return
	}
	q.metrics.done(item)
	delete(q.processing, item)
	if _, ok := q.dirty[item]; ok {
		q.queue = append(q.queue, item)
	}
	q.releaseMetrics()
	q.broadcast()
}

// ShutDown stops accepting adds and drops waiting items; blocked getters return what is
// left, then false. It also ends a ShutDownWithDrain that is still waiting.
func (q *WorkQueue[K]) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.drain = false
	q.shutDown()
}

func (q *WorkQueue[K]) shutDown() {
	if !q.shuttingDown {
		q.shuttingDown = true
		close(q.stopped)
	}
	clear(q.waiting)
	q.heap = nil
	q.releaseMetrics()
	q.broadcast()
}

// releaseMetrics stops the queue's depth and work in progress counting once it has
// shut down and nothing is being processed (lock held).
func (q *WorkQueue[K]) releaseMetrics() {
	if q.shuttingDown && len(q.processing) == 0 {
		q.metrics.release()
	}
}

// ShutDownWithDrain shuts down like ShutDown, then waits until no item is being
// processed or ctx is done. Items still queued are not waited for. A ShutDown meanwhile
// ends the wait at once.
func (q *WorkQueue[K]) ShutDownWithDrain(ctx context.Context) {
	q.mu.Lock()
	q.drain = true
	q.shutDown()
	for len(q.processing) > 0 && q.drain {
		changed := q.changed
		q.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
		q.mu.Lock()
	}
	q.mu.Unlock()
}

// ShuttingDown reports whether ShutDown or ShutDownWithDrain was called.
func (q *WorkQueue[K]) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shuttingDown
}

// Len is the number of items queued and ready (not processing, not waiting).
func (q *WorkQueue[K]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.promoteReady()
	return len(q.queue)
}

// Processing is the number of items handed out and not yet Done.
func (q *WorkQueue[K]) Processing() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.processing)
}

// Waiting is the number of items waiting for their ready time.
func (q *WorkQueue[K]) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

func (q *WorkQueue[K]) broadcast() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// promoteReady moves waiting items whose time has come into the queue (lock held).
func (q *WorkQueue[K]) promoteReady() {
	now := time.Now()
	for len(q.heap) > 0 && !q.heap[0].readyAt.After(now) {
		e := heap.Pop(&q.heap).(heapEntry[K])
		w, ok := q.waiting[e.key]
		if !ok || w.seq != e.seq {
			continue // superseded by an earlier ready time
		}
		delete(q.waiting, e.key)
		if !q.shuttingDown {
			q.add(e.key, w.contexts.items, w.contexts.dropped)
		}
	}
}

// nextReadyAt is the earliest live ready time (lock held); false when none.
func (q *WorkQueue[K]) nextReadyAt() (time.Time, bool) {
	for len(q.heap) > 0 {
		e := q.heap[0]
		if w, ok := q.waiting[e.key]; ok && w.seq == e.seq {
			return e.readyAt, true
		}
		heap.Pop(&q.heap)
	}
	return time.Time{}, false
}

func (q *WorkQueue[K]) delayLoop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.mu.Lock()
		q.promoteReady()
		next, ok := q.nextReadyAt()
		q.mu.Unlock()
		wait := time.Hour
		if ok {
			wait = max(0, time.Until(next))
		}
		timer.Reset(wait)
		select {
		case <-q.stopped:
			return
		case <-q.wake:
		case <-timer.C:
		}
	}
}
