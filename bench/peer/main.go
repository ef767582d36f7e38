// Command steward-bench-peer is the client-go side of bench/scale.py: one informer of a
// client-go SharedInformerFactory for one built-in resource, with the measurements the
// benchmark compares against Steward's informer.
//
// It speaks JSON lines on standard output and takes commands on standard input:
//
//  1. It builds the clientset and the factory, prints {"ready": true} and waits for a line
//     on standard input, so that the benchmark can read its resident memory before the
//     informer starts.
//  2. It starts the factory, waits for the cache to sync and prints {"synced": true, ...}
//     with the seconds from Start to synced and the number of objects in the cache.
//  3. With --expect N, each of the --handlers event handlers counts the ADDED and MODIFIED
//     events after the sync that carry the annotation bench/sent (Unix nanoseconds, set
//     by the writer just before its request), and the delay from that stamp to the
//     handler's call; when every handler has N, it prints the counts and delays and exits.
//     Without --expect it stays until standard input closes.
//
// The line "gc" on standard input runs a garbage collection and prints the live heap.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

const sentAnnotation = "bench/sent"

type options struct {
	kubeconfig  string
	resource    string
	namespace   string
	contentType string
	watchList   bool
	trim        bool
	handlers    int
	expect      int
	timeout     time.Duration
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server (required)")
	flag.StringVar(&o.resource, "resource", "configmaps", "resource to inform on: configmaps or pods")
	flag.StringVar(&o.namespace, "namespace", "", "namespace to inform on (empty: all)")
	flag.StringVar(&o.contentType, "content-type", "json",
		"wire format: json (client-go's default for built-in types) or protobuf (as kube-controller-manager configures)")
	flag.BoolVar(&o.watchList, "watch-list", true,
		"client-go's WatchListClient feature (on by default in this release): the initial sync "+
			"is a WATCH with sendInitialEvents when the server serves it; false makes it a LIST")
	flag.BoolVar(&o.trim, "trim-managed-fields", false,
		"drop metadata.managedFields before caching, as kube-controller-manager's informers do")
	flag.IntVar(&o.handlers, "handlers", 1, "event handlers registered on the informer")
	flag.IntVar(&o.expect, "expect", 0, "stamped events each handler waits for after the sync (0: none)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up waiting for --expect events after this")
	flag.Parse()
	if o.kubeconfig == "" {
		fail("--kubeconfig is required")
	}
	if o.handlers < 1 {
		fail("--handlers must be at least 1")
	}
	return o
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "steward-bench-peer: "+format+"\n", args...)
	os.Exit(2)
}

var stdout = struct {
	sync.Mutex
	enc *json.Encoder
}{enc: json.NewEncoder(os.Stdout)}

func emit(v map[string]any) {
	stdout.Lock()
	defer stdout.Unlock()
	if err := stdout.enc.Encode(v); err != nil {
		fail("writing to standard output: %v", err)
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// handler counts the stamped events one registered handler receives after the sync.
type handler struct {
	synced    *atomic.Bool
	expect    int
	latencies []float64
	first     time.Time
	last      time.Time
	done      chan struct{}
}

func (h *handler) observe(obj any) {
	now := time.Now()
	if !h.synced.Load() || h.expect == 0 || len(h.latencies) >= h.expect {
		return
	}
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	stamp, ok := accessor.GetAnnotations()[sentAnnotation]
	if !ok {
		return // not one of the benchmark's writes
	}
	sent, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return
	}
	if len(h.latencies) == 0 {
		h.first = now
	}
	h.last = now
	h.latencies = append(h.latencies, now.Sub(time.Unix(0, sent)).Seconds())
	if len(h.latencies) == h.expect {
		close(h.done)
	}
}

func trimManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil && accessor.GetManagedFields() != nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}

func main() {
	o := parseFlags()
	if !o.watchList {
		// client-go reads its feature gates from the environment on first use.
		if err := os.Setenv("KUBE_FEATURE_WatchListClient", "false"); err != nil {
			fail("%v", err)
		}
	}
	config, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	config.UserAgent = "steward-bench-peer"
	switch o.contentType {
	case "json":
		// client-go's default for built-in types: ContentType left empty means JSON.
	case "protobuf":
		config.ContentType = "application/vnd.kubernetes.protobuf"
		config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	default:
		fail("--content-type must be json or protobuf, not %q", o.contentType)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail("clientset: %v", err)
	}
	factoryOptions := []informers.SharedInformerOption{informers.WithNamespace(o.namespace)}
	if o.trim {
		factoryOptions = append(factoryOptions, informers.WithTransform(trimManagedFields))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, factoryOptions...)
	var informer cache.SharedIndexInformer
	switch o.resource {
	case "configmaps":
		informer = factory.Core().V1().ConfigMaps().Informer()
	case "pods":
		informer = factory.Core().V1().Pods().Informer()
	default:
		fail("--resource must be configmaps or pods, not %q", o.resource)
	}
	var synced atomic.Bool
	handlers := make([]*handler, o.handlers)
	for i := range handlers {
		h := &handler{synced: &synced, expect: o.expect, done: make(chan struct{})}
		handlers[i] = h
		_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    h.observe,
			UpdateFunc: func(_, obj any) { h.observe(obj) },
		})
		if err != nil {
			fail("adding an event handler: %v", err)
		}
	}

	input := bufio.NewScanner(os.Stdin)
	emit(map[string]any{"ready": true})
	if !input.Scan() {
		return // the benchmark went away before starting us
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := time.Now()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		fail("the informer did not sync")
	}
	syncSeconds := time.Since(started).Seconds()
	synced.Store(true)
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	emit(map[string]any{
		"synced":           true,
		"sync_seconds":     syncSeconds,
		"objects":          len(informer.GetStore().ListKeys()),
		"heap_alloc_bytes": stats.HeapAlloc,
		"go_sys_bytes":     stats.Sys,
	})

	closed := make(chan struct{})
	go func() {
		for input.Scan() {
			if input.Text() == "gc" {
				runtime.GC()
				runtime.ReadMemStats(&stats)
				emit(map[string]any{"heap_live_bytes": stats.HeapAlloc})
			}
		}
		close(closed)
	}()

	if o.expect == 0 {
		<-closed
		return
	}
	deadline := time.After(o.timeout)
	for _, h := range handlers {
		select {
		case <-h.done:
		case <-deadline:
			fail("timed out waiting for %d events per handler", o.expect)
		case <-closed:
			return
		}
	}
	for i, h := range handlers {
		emit(map[string]any{
			"handler":   i,
			"events":    len(h.latencies),
			"first":     unixSeconds(h.first),
			"last":      unixSeconds(h.last),
			"latencies": h.latencies,
		})
	}
	emit(map[string]any{"done": true})
}
