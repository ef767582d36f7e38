// Command podschema prints the Go type layout of k8s.io/api/core/v1.PodTemplateSpec as
// JSON: for every type reachable from it, its reflect kind, its name as Go's reflect
// prints it, and for structs the fields in declaration order with their JSON names.
// Steward's Deployment controller reads this layout to compute the pod-template-hash
// exactly as kube-controller-manager does (it hashes a text dump of the Go value).
//
// Regenerate with: go run . > ../../src/steward/runtime/podtemplate_schema.json
package main

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

type field struct {
	Name   string `json:"name"`
	JSON   string `json:"json"`
	Inline bool   `json:"inline,omitempty"`
	Type   string `json:"type"`
}

type typeInfo struct {
	Kind   string  `json:"kind"`
	Elem   string  `json:"elem,omitempty"`
	Key    string  `json:"key,omitempty"`
	Fields []field `json:"fields,omitempty"`
}

func main() {
	types := map[string]typeInfo{}
	var visit func(t reflect.Type)
	visit = func(t reflect.Type) {
		name := t.String()
		if _, ok := types[name]; ok {
			return
		}
		info := typeInfo{Kind: t.Kind().String()}
		types[name] = info
		switch t.Kind() {
		case reflect.Ptr, reflect.Slice, reflect.Array:
			info.Elem = t.Elem().String()
			visit(t.Elem())
		case reflect.Map:
			info.Key = t.Key().String()
			info.Elem = t.Elem().String()
			visit(t.Key())
			visit(t.Elem())
		case reflect.Struct:
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				tag := strings.Split(f.Tag.Get("json"), ",")
				fl := field{Name: f.Name, JSON: tag[0], Type: f.Type.String()}
				for _, opt := range tag[1:] {
					if opt == "inline" {
						fl.Inline = true
					}
				}
				info.Fields = append(info.Fields, fl)
				visit(f.Type)
			}
		}
		types[name] = info
	}
	root := reflect.TypeOf(corev1.PodTemplateSpec{})
	visit(root)
	out := map[string]any{"root": root.String(), "types": types}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
