package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/url"
	"slices"

	"github.com/steward-dev/steward/runtimes/go/kube"
	"github.com/steward-dev/steward/runtimes/go/steward"
)

// annotation is the pod-template annotation the controller keeps.
const annotation = "steward.dev/config-hash"

// indexConfigMaps indexes Deployments by "namespace/name" of each ConfigMap they use.
const indexConfigMaps = "configmaps"

var (
	deployments = steward.KeyOf(steward.Deployments)
	configMaps  = steward.KeyOf(steward.ConfigMaps)
)

type configMapRef struct {
	Name string `json:"name"`
}

type container struct {
	EnvFrom []struct {
		ConfigMapRef *configMapRef `json:"configMapRef"`
	} `json:"envFrom"`
	Env []struct {
		ValueFrom *struct {
			ConfigMapKeyRef *configMapRef `json:"configMapKeyRef"`
		} `json:"valueFrom"`
	} `json:"env"`
}

// deployment is the part of an apps/v1 Deployment the controller reads.
type deployment struct {
	Spec struct {
		Template struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				Volumes []struct {
					ConfigMap *configMapRef `json:"configMap"`
					Projected *struct {
						Sources []struct {
							ConfigMap *configMapRef `json:"configMap"`
						} `json:"sources"`
					} `json:"projected"`
				} `json:"volumes"`
				Containers     []container `json:"containers"`
				InitContainers []container `json:"initContainers"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

// configMapNames returns the sorted, distinct names of the ConfigMaps the pods use.
func (d *deployment) configMapNames() []string {
	var names []string
	add := func(r *configMapRef) {
		if r != nil && r.Name != "" {
			names = append(names, r.Name)
		}
	}
	spec := &d.Spec.Template.Spec
	for _, v := range spec.Volumes {
		add(v.ConfigMap)
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				add(s.ConfigMap)
			}
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, e := range c.EnvFrom {
			add(e.ConfigMapRef)
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				add(e.ValueFrom.ConfigMapKeyRef)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// indexDeployment is the mirror index from ConfigMaps to the Deployments that use them.
func indexDeployment(o *steward.Object) []string {
	var d deployment
	if err := o.Decode(&d); err != nil {
		return nil
	}
	keys := d.configMapNames()
	for i, n := range keys {
		keys[i] = o.Namespace() + "/" + n
	}
	return keys
}

// configHash hashes the data of the named ConfigMaps as the mirror holds them; a missing
// ConfigMap counts as such, so creating it later changes the hash too.
func configHash(m *steward.Mirror, namespace string, names []string) (string, error) {
	h := sha256.New()
	for _, name := range names {
		fmt.Fprintf(h, "configmap %q\n", name)
		obj := m.Get(configMaps, namespace, name)
		if obj == nil {
			fmt.Fprintf(h, "absent\n")
			continue
		}
		var cm struct {
			Data       map[string]string `json:"data"`
			BinaryData map[string][]byte `json:"binaryData"`
		}
		if err := obj.Decode(&cm); err != nil {
			return "", fmt.Errorf("decode configmap %s/%s: %w", namespace, name, err)
		}
		for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
			fmt.Fprintf(h, "data %q %q\n", k, cm.Data[k])
		}
		for _, k := range slices.Sorted(maps.Keys(cm.BinaryData)) {
			fmt.Fprintf(h, "binary %q %x\n", k, cm.BinaryData[k])
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// reconciler keeps one Deployment's annotation equal to its ConfigMaps' hash.
type reconciler struct {
	mirror *steward.Mirror
	api    *kube.Client
}

func (r *reconciler) Reconcile(ctx context.Context, req steward.Request) (steward.Result, error) {
	obj := r.mirror.Get(deployments, req.Namespace, req.Name)
	if obj == nil {
		return steward.Result{}, nil // deleted: nothing to do
	}
	var d deployment
	if err := obj.Decode(&d); err != nil {
		return steward.Result{}, steward.Terminal(fmt.Errorf("decode deployment %s: %w", req, err))
	}
	names := d.configMapNames()
	have, annotated := d.Spec.Template.Metadata.Annotations[annotation]
	var want any // nil removes the annotation (the merge patch's null)
	if len(names) > 0 {
		hash, err := configHash(r.mirror, req.Namespace, names)
		if err != nil {
			return steward.Result{}, err
		}
		if hash == have {
			return steward.Result{}, nil
		}
		want = hash
	} else if !annotated {
		return steward.Result{}, nil
	}
	patch := map[string]any{
		// Only if nobody changed the Deployment since the mirror saw it (else: retried).
		"metadata": map[string]any{"resourceVersion": obj.ResourceVersion()},
		"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
			"annotations": map[string]any{annotation: want},
		}}},
	}
	path := fmt.Sprintf("/apis/apps/v1/namespaces/%s/deployments/%s", url.PathEscape(req.Namespace), url.PathEscape(req.Name))
	switch err := r.api.MergePatch(ctx, path, patch, nil); {
	case kube.IsNotFound(err):
		return steward.Result{}, nil
	case kube.IsConflict(err):
		return steward.Result{Requeue: true}, nil // changed meanwhile: the new state comes
	case err != nil:
		return steward.Result{}, err
	}
	return steward.Result{}, nil
}

// controller wires confighash: Deployments are primary (spec changes only), a ConfigMap
// change enqueues the Deployments of its namespace that use it (two workers unless
// --workers says otherwise). The reconciler gets the host's fenced API client.
func controller() (*steward.Builder, func(steward.Deps) steward.Reconciler) {
	var mirror *steward.Mirror // set before the mirror delivers its first change
	users := func(o *steward.Object) []steward.Request {
		objs, err := mirror.ByIndex(deployments, indexConfigMaps, o.Namespace()+"/"+o.Name())
		if err != nil {
			return nil
		}
		reqs := make([]steward.Request, 0, len(objs))
		for _, d := range objs {
			reqs = append(reqs, steward.Request{Namespace: d.Namespace(), Name: d.Name()})
		}
		return reqs
	}
	b := steward.NewBuilder("confighash").
		For(steward.Deployments, "Deployment", steward.GenerationChanged).
		Watches(steward.ConfigMaps, users, steward.ResourceVersionChanged).
		WithIndex(indexConfigMaps, indexDeployment).
		WithOptions(steward.ControllerOptions{MaxConcurrentReconciles: 2})
	return b, func(d steward.Deps) steward.Reconciler {
		mirror = d.Mirror
		return &reconciler{mirror: d.Mirror, api: d.API}
	}
}
