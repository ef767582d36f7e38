package steward

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Prometheus metrics of the runtime, under client-go's and controller-runtime's names,
// with the Python runtime's (steward.runtime.metrics) names, labels, help texts and
// buckets, written in the Prometheus text format (version 0.0.4) without a client
// library.
//
// Work queue metrics carry the label "name" (the queue's name); controller metrics
// carry "controller".

// Reconcile results as controller_runtime_reconcile_total's "result" label has them. A
// terminal error is counted as "error" there (and in
// controller_runtime_terminal_reconcile_errors_total), as controller-runtime does.
var reconcileResults = []string{ResultSuccess, ResultError, ResultRequeue, ResultRequeueAfter}

// queueBuckets are controller-runtime's work queue buckets: 10 ns up to 1000 s, by
// factors of ten.
var queueBuckets = func() []float64 {
	out := make([]float64, 12)
	for i := range out {
		out[i] = 10e-9 * math.Pow10(i)
	}
	return out
}()

// reconcileBuckets are controller-runtime's reconcile_time_seconds buckets.
var reconcileBuckets = []float64{
	0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7,
	0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10,
	15, 20, 25, 30, 40, 50, 60,
}

const (
	kindCounter   = "counter"
	kindGauge     = "gauge"
	kindHistogram = "histogram"
)

// series is one labelled time series: a value, or a histogram's per-bucket counts
// (not cumulative), sum and count.
type series struct {
	labels []string // values, in the family's label order
	value  float64
	counts []uint64
	sum    float64
	count  uint64
}

func (s *series) observe(bounds []float64, v float64) {
	if i, _ := slices.BinarySearch(bounds, v); i < len(bounds) {
		s.counts[i]++
	}
	s.sum += v
	s.count++
}

// family is one metric family: its name, type, help, label names and series.
type family struct {
	name, kind, help string
	labelNames       []string
	bounds           []float64 // histograms only
	byKey            map[string]*series
	order            []*series
}

func newFamily(name, kind, help string, bounds []float64, labelNames ...string) *family {
	return &family{name: name, kind: kind, help: help, labelNames: labelNames, bounds: bounds, byKey: map[string]*series{}}
}

// with returns the series of these label values, made (at zero) on first use.
func (f *family) with(values ...string) *series {
	key := strings.Join(values, "\x00")
	if s, ok := f.byKey[key]; ok {
		return s
	}
	s := &series{labels: values}
	if f.kind == kindHistogram {
		s.counts = make([]uint64, len(f.bounds))
	}
	f.byKey[key] = s
	f.order = append(f.order, s)
	return s
}

func (f *family) write(p promWriter) {
	p.family(f.name, f.kind, f.help)
	for _, s := range f.order {
		labels := make([]string, 0, 2*len(f.labelNames))
		for i, n := range f.labelNames {
			labels = append(labels, n, s.labels[i])
		}
		if f.kind != kindHistogram {
			p.sample(f.name, s.value, labels...)
			continue
		}
		cumulative := make([]uint64, len(s.counts))
		var n uint64
		for i, c := range s.counts {
			n += c
			cumulative[i] = n
		}
		p.histogram(f.name, f.bounds, cumulative, s.sum, s.count, labels...)
	}
}

// Metrics holds the runtime's metric families (the workqueue_* and
// controller_runtime_* ones) for the queues and worker pools that report to it, and
// writes them in the Prometheus text format. Every queue and pool of a process usually
// shares one: DefaultMetrics. Queues and pools of the same name add up.
//
// It is safe for concurrent use; recording takes one short lock.
type Metrics struct {
	mu  sync.Mutex
	now func() time.Time

	depth, adds, queueDuration, workDuration, retries     *family
	reconcileTotal, reconcileErrors, terminalErrors       *family
	reconcileTime, activeWorkers, maxConcurrentReconciles *family
	queueNames                                            []string
	liveQueues                                            map[*queueMetrics]struct{}
}

// DefaultMetrics is where queues and worker pools report when their options name no
// Metrics, and what a Host serves on /metrics unless its Builder's options name others.
var DefaultMetrics = NewMetrics()

// NewMetrics returns an empty set of the runtime's metric families.
func NewMetrics() *Metrics {
	return &Metrics{
		now:           time.Now,
		depth:         newFamily("workqueue_depth", kindGauge, "Current depth of the work queue.", nil, "name"),
		adds:          newFamily("workqueue_adds_total", kindCounter, "Total number of adds handled by the work queue.", nil, "name"),
		queueDuration: newFamily("workqueue_queue_duration_seconds", kindHistogram, "How long in seconds an item stays in the work queue before being requested.", queueBuckets, "name"),
		workDuration:  newFamily("workqueue_work_duration_seconds", kindHistogram, "How long in seconds processing an item from the work queue takes.", queueBuckets, "name"),
		retries:       newFamily("workqueue_retries_total", kindCounter, "Total number of retries (delayed and rate-limited adds) handled by the work queue.", nil, "name"),
		reconcileTotal: newFamily("controller_runtime_reconcile_total", kindCounter,
			"Total number of reconciliations per controller, by result.", nil, "controller", "result"),
		reconcileErrors: newFamily("controller_runtime_reconcile_errors_total", kindCounter,
			"Total number of reconciliation errors per controller.", nil, "controller"),
		terminalErrors: newFamily("controller_runtime_terminal_reconcile_errors_total", kindCounter,
			"Total number of terminal reconciliation errors (not retried) per controller.", nil, "controller"),
		reconcileTime: newFamily("controller_runtime_reconcile_time_seconds", kindHistogram,
			"Length of time per reconciliation per controller.", reconcileBuckets, "controller"),
		activeWorkers: newFamily("controller_runtime_active_workers", kindGauge,
			"Number of currently used workers per controller.", nil, "controller"),
		maxConcurrentReconciles: newFamily("controller_runtime_max_concurrent_reconciles", kindGauge,
			"Maximum number of concurrent reconciles per controller.", nil, "controller"),
		liveQueues: map[*queueMetrics]struct{}{},
	}
}

// orDefault is m, or DefaultMetrics when m is nil.
func (m *Metrics) orDefault() *Metrics {
	if m == nil {
		return DefaultMetrics
	}
	return m
}

// WriteText writes every family now, in the Prometheus text format (version 0.0.4):
// the work queues' first, then the controllers'. A family without series is written
// with its HELP and TYPE lines only.
func (m *Metrics) WriteText(w io.Writer) {
	p := promWriter{w}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Depth, unfinished work and the longest-running processor: over the live queues.
	now := m.now()
	type inFlight struct{ depth, unfinished, longest float64 }
	byName := map[string]*inFlight{}
	for _, name := range m.queueNames {
		byName[name] = &inFlight{}
	}
	for q := range m.liveQueues {
		f := byName[q.name]
		f.depth += float64(q.depth)
		for _, started := range q.startedAt {
			age := now.Sub(started).Seconds()
			f.unfinished += age
			f.longest = max(f.longest, age)
		}
	}
	for _, name := range m.queueNames {
		m.depth.with(name).value = byName[name].depth
	}
	for _, f := range []*family{m.depth, m.adds, m.queueDuration, m.workDuration, m.retries} {
		f.write(p)
	}
	p.family("workqueue_unfinished_work_seconds", kindGauge, "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads.")
	for _, name := range m.queueNames {
		p.sample("workqueue_unfinished_work_seconds", byName[name].unfinished, "name", name)
	}
	p.family("workqueue_longest_running_processor_seconds", kindGauge, "How many seconds the longest running processor for the work queue has been running.")
	for _, name := range m.queueNames {
		p.sample("workqueue_longest_running_processor_seconds", byName[name].longest, "name", name)
	}
	for _, f := range []*family{m.reconcileTotal, m.reconcileErrors, m.terminalErrors, m.reconcileTime, m.activeWorkers, m.maxConcurrentReconciles} {
		f.write(p)
	}
}

// queue returns the metrics of a new queue called name: it counts in the families
// until release (its depth and in-flight work stop counting then; its adds, retries
// and durations stay).
func (m *Metrics) queue(name string) *queueMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.queueNames, name) {
		m.queueNames = append(m.queueNames, name)
		m.depth.with(name)
		m.adds.with(name)
		m.queueDuration.with(name)
		m.workDuration.with(name)
		m.retries.with(name)
	}
	q := &queueMetrics{m: m, name: name, addedAt: map[any]time.Time{}, startedAt: map[any]time.Time{}}
	m.liveQueues[q] = struct{}{}
	return q
}

// controller returns the metrics of the worker pools of the controller called name;
// every result label starts at 0.
func (m *Metrics) controller(name string) *controllerMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range reconcileResults {
		m.reconcileTotal.with(name, r)
	}
	m.reconcileErrors.with(name)
	m.terminalErrors.with(name)
	m.reconcileTime.with(name)
	m.activeWorkers.with(name)
	m.maxConcurrentReconciles.with(name)
	return &controllerMetrics{m: m, name: name}
}

// queueMetrics is what one work queue reports, as client-go's queue does: add when an
// item becomes dirty, get when it is handed out, done when it is finished, retry for
// a delayed or rate-limited add. A nil *queueMetrics records nothing.
type queueMetrics struct {
	m         *Metrics
	name      string
	depth     int
	addedAt   map[any]time.Time
	startedAt map[any]time.Time
}

func (q *queueMetrics) add(item any) {
	if q == nil {
		return
	}
	q.m.mu.Lock()
	defer q.m.mu.Unlock()
	q.m.adds.with(q.name).value++
	q.depth++
	if _, ok := q.addedAt[item]; !ok {
		q.addedAt[item] = q.m.now()
	}
}

func (q *queueMetrics) get(item any) {
	if q == nil {
		return
	}
	q.m.mu.Lock()
	defer q.m.mu.Unlock()
	now := q.m.now()
	q.depth--
	q.startedAt[item] = now
	if added, ok := q.addedAt[item]; ok {
		delete(q.addedAt, item)
		q.m.queueDuration.with(q.name).observe(queueBuckets, now.Sub(added).Seconds())
	}
}

func (q *queueMetrics) done(item any) {
	if q == nil {
		return
	}
	q.m.mu.Lock()
	defer q.m.mu.Unlock()
	if started, ok := q.startedAt[item]; ok {
		delete(q.startedAt, item)
		q.m.workDuration.with(q.name).observe(queueBuckets, q.m.now().Sub(started).Seconds())
	}
}

func (q *queueMetrics) retry() {
	if q == nil {
		return
	}
	q.m.mu.Lock()
	defer q.m.mu.Unlock()
	q.m.retries.with(q.name).value++
}

// release stops counting the queue's depth and in-flight work (it has shut down and
// nothing is being processed).
func (q *queueMetrics) release() {
	if q == nil {
		return
	}
	q.m.mu.Lock()
	defer q.m.mu.Unlock()
	delete(q.m.liveQueues, q)
}

// controllerMetrics is what one controller's worker pools report. A nil
// *controllerMetrics records nothing.
type controllerMetrics struct {
	m    *Metrics
	name string
}

// reconciled counts one reconcile ending with outcome (a terminal error is an "error"
// and a terminal error) that took d.
func (c *controllerMetrics) reconciled(outcome string, d time.Duration) {
	if c == nil {
		return
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	result := outcome
	if outcome == ResultTerminalError {
		result = ResultError
		c.m.terminalErrors.with(c.name).value++
	}
	c.m.reconcileTotal.with(c.name, result).value++
	if result == ResultError {
		c.m.reconcileErrors.with(c.name).value++
	}
	c.m.reconcileTime.with(c.name).observe(reconcileBuckets, d.Seconds())
}

func (c *controllerMetrics) activeWorkersAdd(delta int) {
	if c == nil {
		return
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.m.activeWorkers.with(c.name).value += float64(delta)
}

func (c *controllerMetrics) setMaxConcurrentReconciles(n int) {
	if c == nil {
		return
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	c.m.maxConcurrentReconciles.with(c.name).value = float64(n)
}

func promLabel(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

func promFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func promHelp(v string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(v)
}

type promWriter struct {
	w io.Writer
}

func (p promWriter) family(name, kind, help string) {
	fmt.Fprintf(p.w, "# HELP %s %s\n# TYPE %s %s\n", name, promHelp(help), name, kind)
}

func (p promWriter) sample(name string, value float64, labels ...string) {
	var b strings.Builder
	b.WriteString(name)
	if len(labels) > 0 {
		b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s=\"%s\"", labels[i], promLabel(labels[i+1]))
		}
		b.WriteByte('}')
	}
	fmt.Fprintf(p.w, "%s %s\n", b.String(), promFloat(value))
}

// histogram writes one labelled histogram: cumulative counts by upper bound, +Inf
// (the count), the sum and the count.
func (p promWriter) histogram(name string, bounds []float64, cumulative []uint64, sum float64, count uint64, labels ...string) {
	for i, bound := range bounds {
		p.sample(name+"_bucket", float64(cumulative[i]), append(slices.Clone(labels), "le", promFloat(bound))...)
	}
	p.sample(name+"_bucket", float64(count), append(slices.Clone(labels), "le", "+Inf")...)
	p.sample(name+"_sum", sum, labels...)
	p.sample(name+"_count", float64(count), labels...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// writeMetrics writes the host's metrics now: the runtime's (workqueue_*,
// controller_runtime_*), then the host's own (steward_*, rest_client_*).
func (h *Host) writeMetrics(w io.Writer) {
	h.metrics().WriteText(w)
	p := promWriter{w}
	writeBuildInfo(p)
	c := h.ctrl.Load()
	if c == nil {
		return
	}
	name := c.Name
	p.family("steward_controller_active", "gauge", "1 while this instance's workers run (it is the active instance), else 0.")
	p.sample("steward_controller_active", boolValue(c.WorkersRunning()), "controller", name)
	p.family("steward_mirror_synced", "gauge", "1 once the mirror holds the informer's initial list of every watched type.")
	p.sample("steward_mirror_synced", boolValue(c.Mirror.HasSynced()), "controller", name)
	p.family("steward_mirror_reconnects_total", "counter", "Times the mirror's watch stream was opened again.")
	p.sample("steward_mirror_reconnects_total", float64(c.Mirror.Reconnects()), "controller", name)
	var epoch uint64
	if s := c.Session(); s != nil {
		epoch = s.Epoch()
	}
	p.family("steward_manager_epoch", "gauge", "The epoch of the last START from the manager.")
	p.sample("steward_manager_epoch", float64(epoch), "controller", name)
	if api := h.api.Load(); api != nil {
		p.family("steward_fenced_writes_total", "counter", "Writes to kube-apiserver refused because this instance did not hold its lease.")
		p.sample("steward_fenced_writes_total", float64(api.FencedWrites()), "controller", name)
		if api.RateLimited() {
			p.family("rest_client_rate_limiter_duration_seconds", "histogram", "Client side rate limiter latency in seconds. Broken down by verb, and host.")
			for _, w := range api.RateLimiterWaits() {
				p.histogram("rest_client_rate_limiter_duration_seconds", w.Bounds, w.Counts, w.Sum, w.Count, "verb", w.Verb, "host", w.Host)
			}
		}
	}
}
