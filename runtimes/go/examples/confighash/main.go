// Command confighash is an example Steward controller on the Go runtime: it annotates
// each Deployment's pod template with steward.dev/config-hash, a hash of the data of the
// ConfigMaps the pods use (volumes, projected volumes, envFrom, env valueFrom), so that
// changing such a ConfigMap rolls the Deployment out.
//
// It watches Deployments and ConfigMaps through the informer; a ConfigMap change maps to
// the Deployments of its namespace that reference it (an index of the mirror). Writes go
// to kube-apiserver as merge PATCHes, with the reconcile's traceparent, through the
// host's fenced client. steward.Host owns the rest: flags, TLS, tracing, signals, and the
// manager session with --manager.
package main

import (
	"fmt"

	"github.com/steward-dev/steward/runtimes/go/steward"
)

const usage = `confighash keeps the annotation %s on each Deployment's pod template equal
to a hash of the data of the ConfigMaps its pods mount or read (volumes, projected volumes,
envFrom, env valueFrom). When such a ConfigMap changes, the annotation changes and the
Deployment rolls out new pods. It watches deployments (apps/v1) and configmaps (v1).`

func main() {
	b, newReconciler := controller()
	steward.NewHost(b, newReconciler, steward.HostOptions{Usage: fmt.Sprintf(usage, annotation)}).Main()
}
