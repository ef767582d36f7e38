package steward

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The host's /metrics: a few numbers in the Prometheus text format (version 0.0.4),
// under controller-runtime's and client-go's names where they have one, so the Go
// runtime's controllers chart as the Python runtime's do.

func promLabel(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

type promWriter struct {
	w io.Writer
}

func (p promWriter) family(name, kind, help string) {
	fmt.Fprintf(p.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
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
	fmt.Fprintf(p.w, "%s %s\n", b.String(), strconv.FormatFloat(value, 'g', -1, 64))
}

// histogram writes one labelled histogram: cumulative counts by upper bound, +Inf
// (the count), the sum and the count.
func (p promWriter) histogram(name string, bounds []float64, cumulative []uint64, sum float64, count uint64, labels ...string) {
	for i, bound := range bounds {
		p.sample(name+"_bucket", float64(cumulative[i]), append(slices.Clone(labels), "le", strconv.FormatFloat(bound, 'g', -1, 64))...)
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

// writeMetrics writes the host's metrics now.
func (h *Host) writeMetrics(w io.Writer) {
	c := h.ctrl.Load()
	if c == nil {
		return
	}
	p := promWriter{w}
	name := c.Name
	counts := c.ReconcileCounts()
	st := c.Pool().Status()

	p.family("controller_runtime_reconcile_total", "counter", "Total number of reconciliations per controller, by result.")
	results := []string{ResultSuccess, ResultError, ResultRequeue, ResultRequeueAfter, ResultTerminalError}
	for k := range counts {
		if !slices.Contains(results, k) {
			results = append(results, k)
		}
	}
	for _, r := range results {
		p.sample("controller_runtime_reconcile_total", float64(counts[r]), "controller", name, "result", r)
	}
	p.family("controller_runtime_reconcile_errors_total", "counter", "Total number of reconciliation errors per controller.")
	p.sample("controller_runtime_reconcile_errors_total", float64(counts[ResultError]+counts[ResultTerminalError]), "controller", name)
	p.family("controller_runtime_active_workers", "gauge", "Number of currently used workers per controller.")
	p.sample("controller_runtime_active_workers", float64(st.BusyWorkers), "controller", name)
	p.family("controller_runtime_max_concurrent_reconciles", "gauge", "Maximum number of concurrent reconciles per controller.")
	p.sample("controller_runtime_max_concurrent_reconciles", float64(st.Workers), "controller", name)
	p.family("workqueue_depth", "gauge", "Current depth of the work queue.")
	p.sample("workqueue_depth", float64(st.QueueDepth), "name", name)
	p.family("steward_controller_active", "gauge", "1 while this instance's workers run (it is the active instance), else 0.")
	p.sample("steward_controller_active", boolValue(c.WorkersRunning()), "controller", name)
	p.family("steward_mirror_synced", "gauge", "1 once the mirror holds the informer's initial list of every watched type.")
	p.sample("steward_mirror_synced", boolValue(c.Mirror.HasSynced()), "controller", name)
	p.family("steward_mirror_reconnects_total", "counter", "Times the mirror's watch stream was opened again.")
	p.sample("steward_mirror_reconnects_total", float64(c.Mirror.Reconnects()), "controller", name)
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
