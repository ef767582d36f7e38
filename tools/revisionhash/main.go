// Command revisionhash fills in, for each StatefulSet of a test-data file, the
// ControllerRevision that kube-controller-manager (the pinned k8s.io/kubernetes) makes of
// it: the data bytes ("patch": pkg/controller/statefulset's getPatch, written here the
// same way, as it is unexported), the hash and the name (pkg/controller/history's
// NewControllerRevision, called as is). Steward's StatefulSet unit tests compare their
// own computation with these values.
//
// Regenerate (offline, from the module cache):
//
//	GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off go run . \
//	    ../../tests/controllers/statefulset/testdata/revisions.json
package main

import (
	"bytes"
	"encoding/json"
	"os"

	apps "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kubernetes/pkg/controller/history"
)

func main() {
	path := os.Args[1]
	data, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	// Numbers stay as written (json.Number), as the API server's JSON reaches a decoder.
	var cases []map[string]any
	top := json.NewDecoder(bytes.NewReader(data))
	top.UseNumber()
	if err := top.Decode(&cases); err != nil {
		panic(err)
	}
	codec := scheme.Codecs.LegacyCodec(apps.SchemeGroupVersion)
	for _, c := range cases {
		setJSON, err := json.Marshal(c["set"])
		if err != nil {
			panic(err)
		}
		set := &apps.StatefulSet{}
		if err := json.Unmarshal(setJSON, set); err != nil {
			panic(err)
		}
		var collisionCount *int32
		if n, ok := c["collisionCount"].(json.Number); ok {
			v, err := n.Int64()
			if err != nil {
				panic(err)
			}
			count := int32(v)
			collisionCount = &count
		}
		enc, err := runtime.Encode(codec, set)
		if err != nil {
			panic(err)
		}
		var raw map[string]any
		if err := json.Unmarshal(enc, &raw); err != nil {
			panic(err)
		}
		tmpl := raw["spec"].(map[string]any)["template"].(map[string]any)
		tmpl["$patch"] = "replace"
		patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
		if err != nil {
			panic(err)
		}
		cr, err := history.NewControllerRevision(set, apps.SchemeGroupVersion.WithKind("StatefulSet"),
			set.Spec.Template.Labels, runtime.RawExtension{Raw: patch}, 1, collisionCount)
		if err != nil {
			panic(err)
		}
		c["patch"] = string(patch)
		c["hash"] = cr.Labels[history.ControllerRevisionHashLabel]
		c["name"] = cr.Name
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(cases); err != nil {
		panic(err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		panic(err)
	}
}
