package kube

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/steward-dev/steward/runtimes/go/internal/tokenbucket"
)

// The defaults of kube-controller-manager's --kube-api-qps and --kube-api-burst, which
// the host's flags of the same names take.
const (
	DefaultQPS   = 20.0
	DefaultBurst = 30
)

// rateLimiterBuckets are the upper bounds, in seconds, of the histogram of the time
// requests waited for the rate limiter: client-go's for rest_client_* latencies.
var rateLimiterBuckets = [...]float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}

// RateLimiterWaits is the histogram of the time the requests of one verb waited for the
// client's rate limiter (client-go's rest_client_rate_limiter_duration_seconds).
type RateLimiterWaits struct {
	// Verb is the HTTP method; Host is the API server's host:port.
	Verb, Host string
	// Bounds are the buckets' upper bounds in seconds; Counts[i] is how many waits took
	// at most Bounds[i] (cumulative, as Prometheus' le buckets are).
	Bounds []float64
	Counts []uint64
	// Count is how many requests waited (every request of the verb, 0 s waits included);
	// Sum is the seconds they waited in all.
	Count uint64
	Sum   float64
}

type waitHistogram struct {
	counts [len(rateLimiterBuckets)]uint64 // per bucket, not cumulative
	count  uint64
	sum    float64
}

// rateLimiter is the client's token bucket: every request takes a token before it is
// sent, waiting when there is none, as client-go's rest client does.
type rateLimiter struct {
	bucket *tokenbucket.Bucket
	host   string
	now    func() time.Time
	sleep  func(context.Context, time.Duration) error

	mu    sync.Mutex
	waits map[string]*waitHistogram // by verb
}

// newRateLimiter returns the limiter cfg asks for, or nil for none (QPS <= 0, or
// infinite). It panics when QPS > 0 and Burst < 1.
func newRateLimiter(cfg *Config) *rateLimiter {
	if !(cfg.QPS > 0) || math.IsInf(cfg.QPS, 1) {
		return nil
	}
	if cfg.Burst < 1 {
		panic(fmt.Sprintf("kube: a Burst of at least 1 is needed with a QPS above 0, not %d", cfg.Burst))
	}
	host := cfg.Server
	if u, err := url.Parse(cfg.Server); err == nil && u.Host != "" {
		host = u.Host
	}
	return &rateLimiter{
		bucket: tokenbucket.New(cfg.QPS, cfg.Burst, time.Now()),
		host:   host,
		now:    time.Now,
		sleep:  sleepContext,
		waits:  map[string]*waitHistogram{},
	}
}

func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait takes a token for one request of verb, waiting until it is there; the time
// waited is observed either way. A wait that would pass ctx's deadline fails at once,
// and one that ctx ends fails then; in both cases the token is given back.
func (l *rateLimiter) wait(ctx context.Context, verb string) error {
	start := l.now()
	var err error
	if d := l.bucket.Reserve(start); d > 0 {
		if deadline, ok := ctx.Deadline(); ok && deadline.Before(start.Add(d)) {
			err = fmt.Errorf("waiting %v for a token would pass the deadline", d)
		} else {
			err = l.sleep(ctx, d)
		}
		if err != nil {
			l.bucket.Cancel(l.now())
		}
	}
	l.observe(verb, l.now().Sub(start))
	if err != nil {
		return fmt.Errorf("client rate limiter: %w", err)
	}
	return nil
}

func (l *rateLimiter) observe(verb string, waited time.Duration) {
	s := max(0, waited.Seconds())
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.waits[verb]
	if h == nil {
		h = &waitHistogram{}
		l.waits[verb] = h
	}
	h.count++
	h.sum += s
	for i, bound := range rateLimiterBuckets {
		if s <= bound {
			h.counts[i]++
			break
		}
	}
}

func (l *rateLimiter) snapshot() []RateLimiterWaits {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]RateLimiterWaits, 0, len(l.waits))
	for verb, h := range l.waits {
		w := RateLimiterWaits{Verb: verb, Host: l.host, Bounds: rateLimiterBuckets[:], Count: h.count, Sum: h.sum,
			Counts: make([]uint64, len(rateLimiterBuckets))}
		var below uint64
		for i, n := range h.counts {
			below += n
			w.Counts[i] = below
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b RateLimiterWaits) int { return cmp.Compare(a.Verb, b.Verb) })
	return out
}

// RateLimited reports whether the client's requests wait for a token bucket
// (Config.QPS > 0).
func (c *Client) RateLimited() bool { return c.limiter != nil }

// RateLimiterWaits is, by verb (sorted), how long the client's requests waited for its
// rate limiter; none when the client has no limit.
func (c *Client) RateLimiterWaits() []RateLimiterWaits {
	if c.limiter == nil {
		return nil
	}
	return c.limiter.snapshot()
}
