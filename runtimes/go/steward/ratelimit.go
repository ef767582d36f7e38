package steward

import (
	"math"
	"sync"
	"time"

	"github.com/steward-dev/steward/runtimes/go/internal/tokenbucket"
)

// Defaults of the controller rate limiter, as in client-go's DefaultControllerRateLimiter.
const (
	// DefaultBaseDelay is the first per-item backoff (5 ms).
	DefaultBaseDelay = 5 * time.Millisecond
	// DefaultMaxDelay caps the per-item backoff (1000 s).
	DefaultMaxDelay = 1000 * time.Second
	// DefaultQPS is the overall token bucket's refill rate (10 per second).
	DefaultQPS = 10.0
	// DefaultBurst is the overall token bucket's size (100).
	DefaultBurst = 100
)

// RateLimiter decides how long an item waits before it is retried. Implementations must
// be safe for concurrent use.
type RateLimiter[K comparable] interface {
	// When returns how long the item should wait before its next attempt, and counts
	// one requeue.
	When(item K) time.Duration
	// Forget clears the item's history (it succeeded or was given up on).
	Forget(item K)
	// NumRequeues reports how often When was called for the item since it was forgotten.
	NumRequeues(item K) int
}

// ItemExponentialBackoff waits Base·2ⁿ on the n-th retry of an item (n from 0), at most
// Max. Memory grows with the items not yet forgotten, so callers Forget successes.
type ItemExponentialBackoff[K comparable] struct {
	Base, Max time.Duration

	mu       sync.Mutex
	failures map[K]int
}

// NewItemExponentialBackoff returns a backoff of base·2ⁿ capped at max.
func NewItemExponentialBackoff[K comparable](base, max time.Duration) *ItemExponentialBackoff[K] {
	return &ItemExponentialBackoff[K]{Base: base, Max: max, failures: map[K]int{}}
}

// When returns Base·2ⁿ (n counting earlier calls for the item), at most Max.
func (b *ItemExponentialBackoff[K]) When(item K) time.Duration {
	b.mu.Lock()
	exp := b.failures[item]
	b.failures[item] = exp + 1
	b.mu.Unlock()
	d := float64(b.Base) * math.Pow(2, float64(exp))
	if exp >= 1024 || d >= float64(b.Max) {
		return b.Max
	}
	return time.Duration(d)
}

// Forget resets the item's count.
func (b *ItemExponentialBackoff[K]) Forget(item K) {
	b.mu.Lock()
	delete(b.failures, item)
	b.mu.Unlock()
}

// NumRequeues is the number of When calls for the item since it was last forgotten.
func (b *ItemExponentialBackoff[K]) NumRequeues(item K) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failures[item]
}

// TokenBucket is an overall bucket shared by all items: Rate tokens per second, Burst
// deep, starting full. Each When takes a token now or reserves the next one that will be
// there (reservations are never given back, as with golang.org/x/time/rate's Reserve):
// with rate 10 and burst 100, 100 calls at once wait 0, the 101st 100 ms, the 102nd
// 200 ms. It keeps no per-item state.
type TokenBucket[K comparable] struct {
	now    func() time.Time
	bucket *tokenbucket.Bucket
}

// NewTokenBucket returns a full bucket; now is the clock (nil for time.Now).
func NewTokenBucket[K comparable](rate float64, burst int, now func() time.Time) *TokenBucket[K] {
	if rate <= 0 || burst < 1 {
		panic("steward: a token bucket needs rate > 0 and burst >= 1")
	}
	if now == nil {
		now = time.Now
	}
	return &TokenBucket[K]{now: now, bucket: tokenbucket.New(rate, burst, now())}
}

// When reserves one token and returns how long until it is available.
func (t *TokenBucket[K]) When(K) time.Duration { return t.bucket.Reserve(t.now()) }

// Forget does nothing: the bucket is shared by every item.
func (t *TokenBucket[K]) Forget(K) {}

// NumRequeues is always 0: the bucket does not count per item.
func (t *TokenBucket[K]) NumRequeues(K) int { return 0 }

// MaxOf combines rate limiters: the longest delay of them all, the highest count.
type MaxOf[K comparable] []RateLimiter[K]

// When calls every limiter's When (each counts the retry) and returns the maximum.
func (m MaxOf[K]) When(item K) time.Duration {
	var longest time.Duration
	for _, l := range m {
		if d := l.When(item); d > longest {
			longest = d
		}
	}
	return longest
}

// Forget forgets the item in every limiter.
func (m MaxOf[K]) Forget(item K) {
	for _, l := range m {
		l.Forget(item)
	}
}

// NumRequeues is the highest count of any limiter.
func (m MaxOf[K]) NumRequeues(item K) int {
	n := 0
	for _, l := range m {
		n = max(n, l.NumRequeues(item))
	}
	return n
}

// DefaultControllerRateLimiter is client-go's default: the maximum of a 5 ms·2ⁿ backoff
// (at most 1000 s) and a 10 qps, burst 100 token bucket.
func DefaultControllerRateLimiter[K comparable]() RateLimiter[K] {
	return MaxOf[K]{
		NewItemExponentialBackoff[K](DefaultBaseDelay, DefaultMaxDelay),
		NewTokenBucket[K](DefaultQPS, DefaultBurst, nil),
	}
}
