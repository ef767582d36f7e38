// Command statefulsetdiff runs kube-controller-manager's StatefulSet sync (the pinned
// k8s.io/kubernetes's pkg/controller/statefulset, default feature gates) over the
// scenarios of a test-data file and records, for each, the pod writes it makes in order,
// the status it writes and the revisions it creates or deletes. Writes are recorded and
// succeed; claims are read from the scenario's and never change. Steward's StatefulSet
// unit tests replay the same scenarios through their decision functions and compare.
//
// Regenerate (offline, from the module cache):
//
//	GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off go run . \
//	    ../../tests/controllers/statefulset/testdata/scenarios.json
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/kubernetes/pkg/controller/history"
	"k8s.io/kubernetes/pkg/controller/statefulset"
)

var setKind = apps.SchemeGroupVersion.WithKind("StatefulSet")

// recorder is the object manager: it records each write, in call order.
type recorder struct {
	mu      sync.Mutex
	actions []map[string]any
	claims  map[string]*v1.PersistentVolumeClaim
}

func (r *recorder) add(verb string, name string, revision string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.actions = append(r.actions, map[string]any{"verb": verb, "name": name, "revision": revision})
}

func (r *recorder) CreatePod(_ context.Context, pod *v1.Pod, _ *apps.StatefulSet) error {
	r.add("create", pod.Name, pod.Labels[apps.StatefulSetRevisionLabel])
	return nil
}
func (r *recorder) GetPod(_, name string) (*v1.Pod, error) {
	return nil, apierrors.NewNotFound(v1.Resource("pods"), name)
}
func (r *recorder) UpdatePod(pod *v1.Pod, _ *apps.StatefulSet) error {
	r.add("update", pod.Name, pod.Labels[apps.StatefulSetRevisionLabel])
	return nil
}
func (r *recorder) DeletePod(pod *v1.Pod) error {
	r.add("delete", pod.Name, pod.Labels[apps.StatefulSetRevisionLabel])
	return nil
}
func (r *recorder) CreateClaim(claim *v1.PersistentVolumeClaim, _ *apps.StatefulSet) error {
	r.add("create-claim", claim.Name, "")
	return nil
}
func (r *recorder) GetClaim(_, name string) (*v1.PersistentVolumeClaim, error) {
	if claim, ok := r.claims[name]; ok {
		return claim, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("persistentvolumeclaims"), name)
}
func (r *recorder) UpdateClaim(claim *v1.PersistentVolumeClaim, _ *apps.StatefulSet) error {
	owners := []string{}
	for _, ref := range claim.OwnerReferences {
		owners = append(owners, fmt.Sprintf("%s/%s/%s/%t", ref.Kind, ref.Name, ref.UID, ref.Controller != nil && *ref.Controller))
	}
	sort.Strings(owners)
	r.add("update-claim", claim.Name, strings.Join(owners, ","))
	return nil
}

// memoryHistory holds the scenario's revisions and records changes to them.
type memoryHistory struct {
	revisions []*apps.ControllerRevision
	changes   []map[string]any
}

func (h *memoryHistory) ListControllerRevisions(metav1.Object, schema.GroupVersionKind, labels.Selector) ([]*apps.ControllerRevision, error) {
	out := make([]*apps.ControllerRevision, len(h.revisions))
	copy(out, h.revisions)
	return out, nil
}
func (h *memoryHistory) CreateControllerRevision(parent metav1.Object, revision *apps.ControllerRevision, collisionCount *int32) (*apps.ControllerRevision, error) {
	clone := revision.DeepCopy()
	clone.Name = history.ControllerRevisionName(parent.GetName(), history.HashControllerRevision(revision, collisionCount))
	h.changes = append(h.changes, map[string]any{"verb": "create", "name": clone.Name, "revision": clone.Revision})
	return clone, nil
}
func (h *memoryHistory) DeleteControllerRevision(revision *apps.ControllerRevision) error {
	h.changes = append(h.changes, map[string]any{"verb": "delete", "name": revision.Name, "revision": revision.Revision})
	return nil
}
func (h *memoryHistory) UpdateControllerRevision(revision *apps.ControllerRevision, newRevision int64) (*apps.ControllerRevision, error) {
	clone := revision.DeepCopy()
	clone.Revision = newRevision
	h.changes = append(h.changes, map[string]any{"verb": "renumber", "name": clone.Name, "revision": newRevision})
	return clone, nil
}
func (h *memoryHistory) AdoptControllerRevision(_ metav1.Object, _ schema.GroupVersionKind, revision *apps.ControllerRevision) (*apps.ControllerRevision, error) {
	return revision, nil
}
func (h *memoryHistory) ReleaseControllerRevision(_ metav1.Object, revision *apps.ControllerRevision) (*apps.ControllerRevision, error) {
	return revision, nil
}

type statusRecorder struct{ written *apps.StatefulSetStatus }

func (s *statusRecorder) UpdateStatefulSetStatus(_ context.Context, _ *apps.StatefulSet, status *apps.StatefulSetStatus) error {
	s.written = status.DeepCopy()
	return nil
}

// patch is the data of a revision of set's template, as getPatch writes it.
func patch(set *apps.StatefulSet) []byte {
	enc, err := runtime.Encode(scheme.Codecs.LegacyCodec(apps.SchemeGroupVersion), set)
	if err != nil {
		panic(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(enc, &raw); err != nil {
		panic(err)
	}
	tmpl := raw["spec"].(map[string]any)["template"].(map[string]any)
	tmpl["$patch"] = "replace"
	out, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
	if err != nil {
		panic(err)
	}
	return out
}

type recordedRevision struct {
	Template v1.PodTemplateSpec `json:"template"`
	Revision int64              `json:"revision"`
}

type scenario struct {
	Set       apps.StatefulSet           `json:"set"`
	Pods      []v1.Pod                   `json:"pods"`
	Revisions []recordedRevision         `json:"revisions"`
	Now       metav1.Time                `json:"now"`
	Claims    []v1.PersistentVolumeClaim `json:"claims"`
}

func run(raw json.RawMessage) map[string]any {
	var sc scenario
	if err := json.Unmarshal(raw, &sc); err != nil {
		panic(err)
	}
	set := &sc.Set
	var collisions int32
	if set.Status.CollisionCount != nil {
		collisions = *set.Status.CollisionCount
	}
	h := &memoryHistory{}
	for i, r := range sc.Revisions {
		old := set.DeepCopy()
		old.Spec.Template = r.Template
		cr, err := history.NewControllerRevision(set, setKind, r.Template.Labels,
			runtime.RawExtension{Raw: patch(old)}, r.Revision, &collisions)
		if err != nil {
			panic(err)
		}
		cr.Namespace = set.Namespace
		cr.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC))
		h.revisions = append(h.revisions, cr)
	}
	pods := make([]*v1.Pod, len(sc.Pods))
	for i := range sc.Pods {
		pods[i] = &sc.Pods[i]
	}
	rec := &recorder{claims: map[string]*v1.PersistentVolumeClaim{}}
	for i := range sc.Claims {
		rec.claims[sc.Claims[i].Name] = &sc.Claims[i]
	}
	status := &statusRecorder{}
	control := statefulset.NewDefaultStatefulSetControl(
		statefulset.NewStatefulPodControlFromManager(rec, record.NewFakeRecorder(1000)), status, h)
	result, err := control.UpdateStatefulSet(context.Background(), set, pods, sc.Now.Time)
	out := map[string]any{"actions": rec.actions, "revisionChanges": h.changes, "status": result, "written": status.written}
	if err != nil {
		out["error"] = err.Error()
	}
	return out
}

func main() {
	path := os.Args[1]
	data, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	var cases []map[string]json.RawMessage
	if err := json.Unmarshal(data, &cases); err != nil {
		panic(err)
	}
	for _, c := range cases {
		result, err := json.Marshal(run(c["scenario"]))
		if err != nil {
			panic(err)
		}
		c["upstream"] = result
	}
	// One case a line: the file stays small and its diffs readable.
	var buf bytes.Buffer
	buf.WriteString("[\n")
	for i, c := range cases {
		line, err := json.Marshal(c)
		if err != nil {
			panic(err)
		}
		buf.Write(line)
		if i < len(cases)-1 {
			buf.WriteString(",")
		}
		buf.WriteString("\n")
	}
	buf.WriteString("]\n")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		panic(err)
	}
}
