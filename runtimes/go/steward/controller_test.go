package steward

import (
	"testing"
	"time"
)

// fenceSpy is a WriteFencer that keeps the fence it is given.
type fenceSpy struct{ fence func() bool }

func (f *fenceSpy) SetWriteFence(fence func() bool) { f.fence = fence }

func TestFenceFollowsTheLease(t *testing.T) {
	c := &Controller{Name: "fence-test"}
	a, b := &fenceSpy{}, &fenceSpy{}
	c.Fence(a, b)
	if a.fence == nil || b.fence == nil {
		t.Fatal("Fence did not set every client's write fence")
	}
	if !a.fence() {
		t.Fatal("without a manager session the fence refused a write")
	}

	// A session that never became active holds no lease.
	s := NewManagerSession(nil, SessionOptions{Controller: "fence-test"})
	c.mu.Lock()
	c.session = s
	c.mu.Unlock()
	if a.fence() || b.fence() {
		t.Fatal("a session that is not active: the fence let a write through")
	}

	// Active, within the renew deadline: writes pass.
	s.mu.Lock()
	s.active, s.deadline = true, time.Now().Add(time.Minute)
	s.mu.Unlock()
	if !a.fence() {
		t.Fatal("a session holding the lease: the fence refused a write")
	}

	// Still active, but the renew deadline has passed (as after a pause): refused, before
	// the session itself notices and drops active.
	s.mu.Lock()
	s.deadline = time.Now().Add(-time.Millisecond)
	s.mu.Unlock()
	if a.fence() {
		t.Fatal("a session past its renew deadline: the fence let a write through")
	}
}
