package kube

import (
	"context"
	"time"
)

// SetRateLimiterClock makes c's rate limiter read now and wait with sleep, for tests
// that move a fake clock instead of sleeping.
func SetRateLimiterClock(c *Client, now func() time.Time, sleep func(context.Context, time.Duration) error) {
	c.limiter.now = now
	c.limiter.sleep = sleep
}
