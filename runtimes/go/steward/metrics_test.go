package steward

import (
	"bufio"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// scrape parses m's text into "name{labels}" → value, and checks the format on the way:
// every sample's family has a HELP and a TYPE line before it.
func scrape(t *testing.T, m *Metrics) (map[string]float64, map[string]string) {
	t.Helper()
	var b strings.Builder
	m.WriteText(&b)
	values, types := map[string]float64{}, map[string]string{}
	helped := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, _, _ := strings.Cut(rest, " ")
			helped[name] = true
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, kind, _ := strings.Cut(rest, " ")
			types[name] = kind
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("not a sample: %q", line)
		}
		series, raw := line[:i], line[i+1:]
		v, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		name, _, _ := strings.Cut(series, "{")
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && types[b] == kindHistogram {
				base = b
			}
		}
		if !helped[base] || types[base] == "" {
			t.Fatalf("sample %q before its family's HELP and TYPE", line)
		}
		values[series] = v
	}
	return values, types
}

func TestMetricsOfAPoolAndItsQueue(t *testing.T) {
	m := NewMetrics()
	var mu sync.Mutex
	seen := map[string]int{}
	r := ReconcilerFunc(func(ctx context.Context, req Request) (Result, error) {
		mu.Lock()
		seen[req.Name]++
		n := seen[req.Name]
		mu.Unlock()
		switch req.Name {
		case "flaky":
			if n < 3 {
				return Result{}, errors.New("not yet")
			}
		case "terminal":
			return Result{}, Terminal(errors.New("bad spec"))
		case "later":
			if n == 1 {
				return Result{RequeueAfter: 10 * time.Millisecond}, nil
			}
		case "again":
			if n == 1 {
				return Result{Requeue: true}, nil
			}
		}
		return Result{}, nil
	})
	pool := NewWorkerPool("pool", r, nil, WorkerOptions{MaxConcurrentReconciles: 2, Metrics: m})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { pool.Run(ctx); close(done) }()
	for _, n := range []string{"flaky", "terminal", "later", "again", "fine"} {
		pool.Queue.Add(Request{Name: n})
	}
	total := func() uint64 {
		var n uint64
		for _, v := range pool.Status().Reconciles {
			n += v
		}
		return n
	}
	// flaky 3, terminal 1, later 2, again 2, fine 1.
	eventually(t, "every reconcile", func() bool { return total() == 9 })
	cancel()
	<-done

	v, types := scrape(t, m)
	want := map[string]float64{
		`controller_runtime_reconcile_total{controller="pool",result="success"}`:        4,
		`controller_runtime_reconcile_total{controller="pool",result="error"}`:          3,
		`controller_runtime_reconcile_total{controller="pool",result="requeue"}`:        1,
		`controller_runtime_reconcile_total{controller="pool",result="requeue_after"}`:  1,
		`controller_runtime_reconcile_errors_total{controller="pool"}`:                  3,
		`controller_runtime_terminal_reconcile_errors_total{controller="pool"}`:         1,
		`controller_runtime_reconcile_time_seconds_count{controller="pool"}`:            9,
		`controller_runtime_reconcile_time_seconds_bucket{controller="pool",le="+Inf"}`: 9,
		`controller_runtime_active_workers{controller="pool"}`:                          0,
		`controller_runtime_max_concurrent_reconciles{controller="pool"}`:               2,
		// Five adds, then one each for flaky's two retries, later and again.
		`workqueue_adds_total{name="pool"}`:                             9,
		`workqueue_retries_total{name="pool"}`:                          4,
		`workqueue_depth{name="pool"}`:                                  0,
		`workqueue_queue_duration_seconds_count{name="pool"}`:           9,
		`workqueue_work_duration_seconds_count{name="pool"}`:            9,
		`workqueue_work_duration_seconds_bucket{name="pool",le="+Inf"}`: 9,
		`workqueue_unfinished_work_seconds{name="pool"}`:                0,
		`workqueue_longest_running_processor_seconds{name="pool"}`:      0,
	}
	for series, n := range want {
		if got, ok := v[series]; !ok || got != n {
			t.Errorf("%s = %v (present: %v), want %v", series, got, ok, n)
		}
	}
	for name, kind := range map[string]string{
		"workqueue_depth": kindGauge, "workqueue_adds_total": kindCounter,
		"workqueue_queue_duration_seconds": kindHistogram, "workqueue_work_duration_seconds": kindHistogram,
		"workqueue_retries_total": kindCounter, "workqueue_unfinished_work_seconds": kindGauge,
		"workqueue_longest_running_processor_seconds": kindGauge,
		"controller_runtime_reconcile_total":          kindCounter, "controller_runtime_reconcile_errors_total": kindCounter,
		"controller_runtime_terminal_reconcile_errors_total": kindCounter,
		"controller_runtime_reconcile_time_seconds":          kindHistogram,
		"controller_runtime_active_workers":                  kindGauge, "controller_runtime_max_concurrent_reconciles": kindGauge,
	} {
		if types[name] != kind {
			t.Errorf("TYPE of %s = %q, want %q", name, types[name], kind)
		}
	}
	// controller-runtime's buckets, as the Python runtime writes them.
	for _, le := range []string{"1e-08", "1e-07", "0.001", "1", "1000"} {
		if _, ok := v[`workqueue_queue_duration_seconds_bucket{name="pool",le="`+le+`"}`]; !ok {
			t.Errorf("no queue duration bucket le=%s", le)
		}
	}
	for _, le := range []string{"0.005", "1.25", "60"} {
		if _, ok := v[`controller_runtime_reconcile_time_seconds_bucket{controller="pool",le="`+le+`"}`]; !ok {
			t.Errorf("no reconcile time bucket le=%s", le)
		}
	}
}

func TestQueueMetricsDepthAndWorkInProgress(t *testing.T) {
	m := NewMetrics()
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	q := NewWorkQueue(QueueOptions[string]{Name: "q", Metrics: m})
	unnamed := NewWorkQueue(QueueOptions[string]{Metrics: m})
	defer unnamed.ShutDown()
	unnamed.Add("x")
	q.Add("a")
	q.Add("a") // coalesces: not an add
	q.Add("b")
	v, _ := scrape(t, m)
	if v[`workqueue_depth{name="q"}`] != 2 || v[`workqueue_adds_total{name="q"}`] != 2 {
		t.Fatalf("depth %v, adds %v; want 2, 2", v[`workqueue_depth{name="q"}`], v[`workqueue_adds_total{name="q"}`])
	}
	if _, ok := v[`workqueue_depth{name=""}`]; ok {
		t.Fatal("an unnamed queue records nothing")
	}
	now = now.Add(2 * time.Second)
	a, _ := q.TryGet()
	now = now.Add(time.Second)
	b, _ := q.TryGet()
	now = now.Add(4 * time.Second)
	v, _ = scrape(t, m)
	// a has run for 5 s, b for 4 s.
	if v[`workqueue_unfinished_work_seconds{name="q"}`] != 9 || v[`workqueue_longest_running_processor_seconds{name="q"}`] != 5 {
		t.Fatalf("unfinished %v, longest %v; want 9, 5", v[`workqueue_unfinished_work_seconds{name="q"}`], v[`workqueue_longest_running_processor_seconds{name="q"}`])
	}
	if v[`workqueue_depth{name="q"}`] != 0 || v[`workqueue_queue_duration_seconds_sum{name="q"}`] != 5 {
		t.Fatalf("depth %v, queued for %v s; want 0, 2+3", v[`workqueue_depth{name="q"}`], v[`workqueue_queue_duration_seconds_sum{name="q"}`])
	}
	q.Done(a.Key)
	v, _ = scrape(t, m)
	if v[`workqueue_work_duration_seconds_sum{name="q"}`] != 5 || v[`workqueue_work_duration_seconds_bucket{name="q",le="1"}`] != 0 ||
		v[`workqueue_work_duration_seconds_bucket{name="q",le="10"}`] != 1 {
		t.Fatalf("work duration after a's 5 s: %v", v)
	}
	// Shut down with c still queued and b in flight: counted until b is done.
	q.Add("c")
	q.ShutDown()
	v, _ = scrape(t, m)
	if v[`workqueue_depth{name="q"}`] != 1 || v[`workqueue_longest_running_processor_seconds{name="q"}`] != 4 {
		t.Fatalf("while b runs after shutdown: %v", v)
	}
	q.Done(b.Key)
	v, _ = scrape(t, m)
	if v[`workqueue_depth{name="q"}`] != 0 || v[`workqueue_unfinished_work_seconds{name="q"}`] != 0 || v[`workqueue_adds_total{name="q"}`] != 3 {
		t.Fatalf("a released queue no longer counts its depth: %v", v)
	}
	// A new queue of the same name adds to the same series.
	q2 := NewWorkQueue(QueueOptions[string]{Name: "q", Metrics: m})
	defer q2.ShutDown()
	q2.AddAfter("d", time.Hour)
	q2.Add("e")
	v, _ = scrape(t, m)
	if v[`workqueue_adds_total{name="q"}`] != 4 || v[`workqueue_retries_total{name="q"}`] != 1 || v[`workqueue_depth{name="q"}`] != 1 {
		t.Fatalf("the second queue of the name: %v", v)
	}
}

func TestMetricsEscapeLabelValues(t *testing.T) {
	m := NewMetrics()
	m.controller("a\"b\\c\nd")
	var b strings.Builder
	m.WriteText(&b)
	if !strings.Contains(b.String(), `controller_runtime_active_workers{controller="a\"b\\c\nd"} 0`) {
		t.Fatalf("label not escaped:\n%s", b.String())
	}
}
