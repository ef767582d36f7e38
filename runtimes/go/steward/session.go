package steward

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/steward-dev/steward/runtimes/go/gen/steward/v1"
)

// RuntimeVersion is the version of this runtime, sent with every registration.
const RuntimeVersion = "0.1.0"

// DefaultInstanceID is "<hostname>-<pid>-<random>": unique per process.
func DefaultInstanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// RegistrationRefusedError means the manager refused the registration for good:
// ALREADY_EXISTS (another live instance holds the name and standby was not asked for;
// the message names the holder) or INVALID_ARGUMENT.
type RegistrationRefusedError struct {
	Code    codes.Code
	Message string
}

func (e *RegistrationRefusedError) Error() string {
	return fmt.Sprintf("registration refused (%s): %s", e.Code, e.Message)
}

// SessionOptions say who the instance is, how it reconnects, and what it does on the
// manager's commands. Only Controller is required.
type SessionOptions struct {
	// Controller is the controller name (a DNS-1123 label).
	Controller string
	// InstanceID identifies this process; defaults to DefaultInstanceID().
	InstanceID string
	// Language of the runtime. Defaults to "go".
	Language string
	// RuntimeVersion defaults to RuntimeVersion.
	RuntimeVersion string
	// Watches lists the resource types the controller watches (operators' view).
	Watches []*pb.ResourceType
	// Standby waits as a standby when another instance holds the name, instead of being
	// refused. Defaults to false.
	Standby bool
	// ReconnectInitial is the first reconnection delay; it doubles up to the retry
	// period. Defaults to 100 ms.
	ReconnectInitial time.Duration
	// StopTimeout is how long Close waits for the manager's goodbye. Defaults to 5 s.
	StopTimeout time.Duration
	// Logger receives the session's logs. Defaults to slog.Default().
	Logger *slog.Logger

	// Status returns the instance's status for each heartbeat (nil for an empty one).
	Status func() *pb.InstanceStatus
	// OnStart is called with the epoch when the instance becomes active.
	OnStart func(epoch uint64)
	// OnDrain is called on DRAIN: stop taking work, finish what is in flight, return.
	OnDrain func()
	// OnStop is called with the reason when the instance stops being active (STOP,
	// lease lost, close). It should stop reconciling at once.
	OnStop func(reason string)
}

// ManagerSession keeps one controller instance registered with the manager
// (steward.v1.ManagerService/Session): it sends a heartbeat with the instance's status
// every retry period, runs the START / DRAIN / STOP callbacks, and answers HoldsLease,
// which a runtime checks before each reconcile.
//
// # Fencing
//
// The instance reconciles only while the manager keeps acknowledging its heartbeats:
// HoldsLease is true only until renew_deadline after sending the last heartbeat the
// manager acknowledged as ACTIVE with the current epoch. The manager renews the lease
// when that heartbeat arrives (later) and promotes nobody before lease_duration after
// it; since renew_deadline < lease_duration, this instance stops before any other may
// start. START only arms this: the instance becomes active once a heartbeat sent after
// the START is acknowledged in time.
//
// # Recovery
//
// When the stream breaks (manager restart, new leader, network), the session keeps its
// state and reconnects with exponential backoff (from ReconnectInitial up to the retry
// period), registering again with the same instance id; the manager recognises the
// holder and it stays active with the same epoch, provided that happens before the renew
// deadline, otherwise it stops being active (OnStop) and waits for a new START.
// ALREADY_EXISTS and INVALID_ARGUMENT end Run with a *RegistrationRefusedError;
// FAILED_PRECONDITION (controller disabled) and every other failure are retried.
type ManagerSession struct {
	client pb.ManagerServiceClient
	opts   SessionOptions
	log    *slog.Logger

	mu            sync.Mutex
	active        bool
	pendingStart  bool
	drained       bool
	epoch         uint64
	role          pb.Role
	holder        string
	deadline      time.Time
	sequence      uint64
	sent          map[uint64]time.Time
	commands      []pb.CommandType
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration

	transition sync.Mutex // serialises becoming active / dropping, and their callbacks

	streamMu   sync.Mutex // guards the current stream and serialises sends on it
	stream     grpc.BidiStreamingClient[pb.SessionRequest, pb.SessionResponse]
	streamDone chan struct{}

	closing      atomic.Bool
	deregistered atomic.Bool
	reconnect    chan struct{}
	registered   chan struct{}
	regOnce      sync.Once
}

// NewManagerSession returns a session with the manager behind conn; Run starts it.
func NewManagerSession(conn grpc.ClientConnInterface, opts SessionOptions) *ManagerSession {
	if opts.InstanceID == "" {
		opts.InstanceID = DefaultInstanceID()
	}
	if opts.Language == "" {
		opts.Language = "go"
	}
	if opts.RuntimeVersion == "" {
		opts.RuntimeVersion = RuntimeVersion
	}
	if opts.ReconnectInitial <= 0 {
		opts.ReconnectInitial = 100 * time.Millisecond
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 5 * time.Second
	}
	s := &ManagerSession{
		client:        pb.NewManagerServiceClient(conn),
		opts:          opts,
		log:           opts.Logger,
		sent:          map[uint64]time.Time{},
		leaseDuration: 15 * time.Second,
		renewDeadline: 10 * time.Second,
		retryPeriod:   2 * time.Second,
		reconnect:     make(chan struct{}, 1),
		registered:    make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("controller", opts.Controller, "instance", opts.InstanceID)
	return s
}

// InstanceID is this instance's id.
func (s *ManagerSession) InstanceID() string { return s.opts.InstanceID }

// HoldsLease reports whether the instance is active and within the renew deadline of
// its last acknowledged heartbeat, checked against the clock now (a process that was
// frozen sees false at once when it resumes).
func (s *ManagerSession) HoldsLease() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active && time.Now().Before(s.deadline)
}

// Active reports whether the instance is active (see also HoldsLease).
func (s *ManagerSession) Active() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

// Role is the role of the last registration or START.
func (s *ManagerSession) Role() pb.Role {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.role
}

// Epoch is the epoch of the last START (the fencing token while active).
func (s *ManagerSession) Epoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// Holder is, for a standby, the active instance's id.
func (s *ManagerSession) Holder() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holder
}

// Commands returns every command received, in order.
func (s *ManagerSession) Commands() []pb.CommandType {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pb.CommandType(nil), s.commands...)
}

// Registered is closed once the manager has answered a registration.
func (s *ManagerSession) Registered() <-chan struct{} { return s.registered }

func (s *ManagerSession) becomeActive(deadline time.Time) {
	s.transition.Lock()
	defer s.transition.Unlock()
	s.mu.Lock()
	s.pendingStart = false
	s.deadline = deadline
	s.active = true
	epoch := s.epoch
	s.mu.Unlock()
	s.log.Info("active", "epoch", epoch)
	if s.opts.OnStart != nil {
		s.opts.OnStart(epoch)
	}
}

func (s *ManagerSession) drop(reason string) {
	s.transition.Lock()
	defer s.transition.Unlock()
	s.mu.Lock()
	s.pendingStart = false
	was := s.active
	s.active = false
	s.mu.Unlock()
	if was {
		s.log.Warn("not active any more", "reason", reason)
		if s.opts.OnStop != nil {
			s.opts.OnStop(reason)
		}
	}
}

func (s *ManagerSession) signalReconnect() {
	select {
	case s.reconnect <- struct{}{}:
	default:
	}
}

// Run stays registered until STOP, Close or ctx is cancelled (then it deregisters, as
// Close does, and returns nil); see the type's docs for failures. It returns a
// *RegistrationRefusedError when the manager refuses the registration for good.
func (s *ManagerSession) Run(ctx context.Context) error {
	fenceCtx, stopFence := context.WithCancel(context.Background())
	fenceDone := make(chan struct{})
	go func() { defer close(fenceDone); s.fence(fenceCtx) }()
	defer func() {
		stopFence()
		<-fenceDone
		s.drop("session ended")
	}()
	delay := s.opts.ReconnectInitial
	for !s.closing.Load() {
		stopped, err := s.connectOnce(ctx)
		if stopped {
			return nil
		}
		var refused *RegistrationRefusedError
		if errors.As(err, &refused) {
			s.drop("registration refused")
			return err
		}
		if err == nil {
			delay = s.opts.ReconnectInitial
		} else if st, _ := status.FromError(err); st.Code() == codes.FailedPrecondition {
			s.log.Warn("registration not accepted; retrying", "error", st.Message())
			delay = max(delay, s.retryPeriodNow())
		} else {
			s.log.Info("session ended; reconnecting", "error", err)
		}
		if s.closing.Load() {
			return nil
		}
		if ctx.Err() != nil {
			s.Close("shutting down")
			return nil
		}
		jittered := time.Duration(float64(delay) * (0.8 + 0.4*mrand.Float64()))
		select {
		case <-ctx.Done():
			s.Close("shutting down")
			return nil
		case <-time.After(jittered):
		}
		delay = min(delay*2, s.retryPeriodNow())
	}
	return nil
}

func (s *ManagerSession) retryPeriodNow() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retryPeriod
}

// Close stops being active (OnStop), deregisters so that a standby is promoted at once,
// waits up to StopTimeout for the manager to end the stream, and makes Run return. It
// is safe to call more than once and when not connected.
func (s *ManagerSession) Close(reason string) {
	s.closing.Store(true)
	s.drop(reason)
	s.streamMu.Lock()
	done := s.streamDone
	s.streamMu.Unlock()
	if done != nil && !s.deregistered.Load() {
		req := &pb.SessionRequest{Kind: &pb.SessionRequest_Deregistration{Deregistration: &pb.Deregistration{Reason: reason}}}
		if s.send(req) == nil {
			s.deregistered.Store(true)
			select {
			case <-done:
			case <-time.After(s.opts.StopTimeout):
			}
		}
	}
	s.signalReconnect()
}

func (s *ManagerSession) send(req *pb.SessionRequest) error {
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	if s.stream == nil {
		return errors.New("not connected")
	}
	return s.stream.Send(req)
}

func (s *ManagerSession) heartbeat() {
	var st *pb.InstanceStatus
	if s.opts.Status != nil {
		st = s.opts.Status()
	}
	if st == nil {
		st = &pb.InstanceStatus{}
	}
	s.mu.Lock()
	s.sequence++
	seq := s.sequence
	st.Drained = s.drained
	s.sent[seq] = time.Now()
	if len(s.sent) > 64 {
		for k := range s.sent {
			if k+32 < seq {
				delete(s.sent, k)
			}
		}
	}
	s.mu.Unlock()
	_ = s.send(&pb.SessionRequest{Kind: &pb.SessionRequest_Heartbeat{Heartbeat: &pb.Heartbeat{Sequence: seq, Status: st}}})
}

// fence drops active when the renew deadline passes without an acknowledgement.
func (s *ManagerSession) fence(ctx context.Context) {
	for {
		s.mu.Lock()
		active, deadline, renew := s.active, s.deadline, s.renewDeadline
		s.mu.Unlock()
		wait := 50 * time.Millisecond
		if active {
			remaining := time.Until(deadline)
			if remaining <= 0 {
				s.drop(fmt.Sprintf("no heartbeat acknowledged within the renew deadline (%s)", renew))
				s.signalReconnect()
				continue
			}
			wait = min(remaining, 500*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// connectOnce holds one stream. stopped means Run should return (STOP or Close); a nil
// error with stopped false means reconnect at once.
func (s *ManagerSession) connectOnce(ctx context.Context) (stopped bool, err error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stream, err := s.client.Session(sctx)
	if err != nil {
		return false, err
	}
	done := make(chan struct{})
	s.streamMu.Lock()
	s.stream, s.streamDone = stream, done
	s.streamMu.Unlock()
	defer func() {
		close(done)
		s.streamMu.Lock()
		s.stream, s.streamDone = nil, nil
		s.streamMu.Unlock()
	}()
	select { // a stale wake-up from the previous stream
	case <-s.reconnect:
	default:
	}
	s.mu.Lock()
	clear(s.sent)
	s.mu.Unlock()

	o := s.opts
	sent := time.Now()
	err = s.send(&pb.SessionRequest{Kind: &pb.SessionRequest_Registration{Registration: &pb.Registration{
		Controller: o.Controller, InstanceId: o.InstanceID, Language: o.Language,
		RuntimeVersion: o.RuntimeVersion, Watches: o.Watches, Standby: o.Standby,
	}}})
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	first, err := stream.Recv()
	if err != nil {
		return false, s.classify(err)
	}
	s.onRegistered(first.GetRegistrationResult(), sent)

	// Watch for a reconnect request or the caller's cancellation while reading.
	serving := make(chan struct{})
	defer close(serving)
	go func() {
		select {
		case <-serving:
			return
		case <-s.reconnect:
		case <-ctx.Done():
			s.Close("shutting down")
		}
		cancel()
	}()
	go func() {
		for {
			s.heartbeat()
			select {
			case <-sctx.Done():
				return
			case <-time.After(s.retryPeriodNow()):
			}
		}
	}()
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return s.deregistered.Load() || s.closing.Load(), nil
		}
		if err != nil {
			if s.closing.Load() {
				return true, nil
			}
			if sctx.Err() != nil {
				return false, nil // we cut it: reconnect
			}
			return false, s.classify(err)
		}
		switch kind := msg.GetKind().(type) {
		case *pb.SessionResponse_HeartbeatAck:
			s.onAck(kind.HeartbeatAck)
		case *pb.SessionResponse_Command:
			s.onCommand(kind.Command)
		}
	}
}

func (s *ManagerSession) classify(err error) error {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.AlreadyExists, codes.InvalidArgument:
		return &RegistrationRefusedError{Code: st.Code(), Message: st.Message()}
	case codes.Aborted:
		s.drop(st.Message())
	}
	return err
}

func (s *ManagerSession) onRegistered(r *pb.RegistrationResult, sent time.Time) {
	s.mu.Lock()
	if d := r.GetLeaseDuration().AsDuration(); d > 0 {
		s.leaseDuration = d
	}
	if d := r.GetRenewDeadline().AsDuration(); d > 0 {
		s.renewDeadline = d
	}
	if d := r.GetRetryPeriod().AsDuration(); d > 0 {
		s.retryPeriod = d
	}
	s.role = r.GetRole()
	s.holder = r.GetHolder()
	keep := r.GetRole() == pb.Role_ROLE_ACTIVE && r.GetEpoch() == s.epoch
	if keep && s.active {
		// The registration renewed our lease as a heartbeat would.
		if d := sent.Add(s.renewDeadline); d.After(s.deadline) {
			s.deadline = d
		}
	}
	s.mu.Unlock()
	if !keep {
		s.drop("registered as " + r.GetRole().String())
	}
	s.regOnce.Do(func() { close(s.registered) })
	s.log.Info("registered", "role", r.GetRole().String(), "epoch", r.GetEpoch(), "holder", r.GetHolder())
}

func (s *ManagerSession) onCommand(c *pb.Command) {
	s.mu.Lock()
	s.commands = append(s.commands, c.GetType())
	s.mu.Unlock()
	s.log.Info("command", "type", c.GetType().String(), "epoch", c.GetEpoch(), "reason", c.GetReason())
	switch c.GetType() {
	case pb.CommandType_COMMAND_TYPE_START:
		s.mu.Lock()
		same := s.active && c.GetEpoch() == s.epoch
		s.mu.Unlock()
		if same {
			return
		}
		s.drop(fmt.Sprintf("restarted with epoch %d", c.GetEpoch()))
		s.mu.Lock()
		s.epoch = c.GetEpoch()
		s.role = pb.Role_ROLE_ACTIVE
		s.pendingStart = true
		s.drained = false
		s.mu.Unlock()
		s.heartbeat()
	case pb.CommandType_COMMAND_TYPE_DRAIN:
		go func() {
			if s.opts.OnDrain != nil {
				s.opts.OnDrain()
			}
			s.mu.Lock()
			s.drained = true
			s.mu.Unlock()
			s.heartbeat()
		}()
	case pb.CommandType_COMMAND_TYPE_STOP:
		s.drop("STOP: " + c.GetReason())
		s.closing.Store(true)
		s.deregistered.Store(true)
		_ = s.send(&pb.SessionRequest{Kind: &pb.SessionRequest_Deregistration{Deregistration: &pb.Deregistration{Reason: "told to stop"}}})
	}
}

func (s *ManagerSession) onAck(a *pb.HeartbeatAck) {
	s.mu.Lock()
	sent, ok := s.sent[a.GetSequence()]
	delete(s.sent, a.GetSequence())
	if a.GetRole() != pb.Role_ROLE_ACTIVE || a.GetEpoch() != s.epoch {
		active := s.active
		s.mu.Unlock()
		if active {
			s.drop("the manager says " + a.GetRole().String())
		}
		return
	}
	if !ok {
		s.mu.Unlock()
		return
	}
	deadline := sent.Add(s.renewDeadline)
	if !time.Now().Before(deadline) {
		s.mu.Unlock()
		return // too late to count
	}
	if s.pendingStart {
		s.mu.Unlock()
		s.becomeActive(deadline)
		return
	}
	if s.active && deadline.After(s.deadline) {
		s.deadline = deadline
	}
	s.mu.Unlock()
}
