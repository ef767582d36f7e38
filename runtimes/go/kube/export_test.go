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

// SetCredentialClock makes c's token file and exec plugin credentials read now, for
// tests that move a fake clock past a refresh or an expiry instead of sleeping.
func SetCredentialClock(c *Client, now func() time.Time) {
	switch s := c.creds.(type) {
	case *fileTokenSource:
		s.now = now
	case *execSource:
		s.now = now
	}
}

// InClusterFrom is the in-cluster config with the service account files in dir (which
// ends in a separator) instead of the kubelet's mount.
var InClusterFrom = inClusterFrom
