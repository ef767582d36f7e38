// Package tokenbucket is the arithmetic of a token bucket: rate tokens a second into a
// bucket of burst, full at the start, each taker reserving one token now or the next one
// to come. It is shared by package steward (the work queue's overall retry limiter) and
// package kube (the API client's --kube-api-qps and --kube-api-burst), which must not
// import each other both ways. Callers pass the time; readings of time.Now carry Go's
// monotonic clock, so a wall clock set back or forward changes nothing.
package tokenbucket

import (
	"math"
	"sync"
	"time"
)

// Bucket is safe for concurrent use.
type Bucket struct {
	rate  float64
	burst float64

	mu     sync.Mutex
	tokens float64 // below 0: tokens already promised to takers still waiting
	last   time.Time
}

// New returns a full bucket at time now. It panics unless rate > 0 (and finite) and
// burst >= 1.
func New(rate float64, burst int, now time.Time) *Bucket {
	if !(rate > 0) || math.IsInf(rate, 1) || burst < 1 {
		panic("tokenbucket: a token bucket needs a finite rate > 0 and burst >= 1")
	}
	return &Bucket{rate: rate, burst: float64(burst), tokens: float64(burst), last: now}
}

// refill adds the tokens that came in since the last reading; a reading earlier than
// the last one adds nothing. Callers hold mu.
func (b *Bucket) refill(now time.Time) {
	if elapsed := now.Sub(b.last).Seconds(); elapsed > 0 {
		b.tokens = math.Min(b.burst, b.tokens+elapsed*b.rate)
		b.last = now
	}
}

// Reserve takes one token at time now and returns how long until it is there: 0 when
// the bucket had one, else the time the tokens promised before it and this one take to
// come in. A reservation is kept unless given back with Cancel.
func (b *Bucket) Reserve(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// Cancel gives back one token reserved earlier and not used (its taker gave up waiting),
// so that takers after it wait less; the bucket never holds more than burst.
func (b *Bucket) Cancel(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.tokens = math.Min(b.burst, b.tokens+1)
}

// Tokens is how many tokens the bucket holds at time now (negative while takers wait).
func (b *Bucket) Tokens(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	return b.tokens
}
