// Command confighash is an example Steward controller on the Go runtime: it annotates
// each Deployment's pod template with steward.dev/config-hash, a hash of the data of the
// ConfigMaps the pods use (volumes, projected volumes, envFrom, env valueFrom), so that
// changing such a ConfigMap rolls the Deployment out.
//
// It watches Deployments and ConfigMaps through the informer; a ConfigMap change maps to
// the Deployments of its namespace that reference it (an index of the mirror). Writes go
// to kube-apiserver as merge PATCHes, with the reconcile's traceparent. With --manager it
// registers with Steward's manager and reconciles only while it is the active instance.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"

	"github.com/steward-dev/steward/runtimes/go/kube"
	"github.com/steward-dev/steward/runtimes/go/steward"
)

const usage = `Usage: confighash --informer HOST:PORT [--manager HOST:PORT] [flags]

confighash keeps the annotation %s on each Deployment's pod template equal
to a hash of the data of the ConfigMaps its pods mount or read (volumes, projected volumes,
envFrom, env valueFrom). When such a ConfigMap changes, the annotation changes and the
Deployment rolls out new pods.

It watches deployments (apps/v1) and configmaps (v1) through Steward's informer, and writes
to kube-apiserver with the credentials of --kubeconfig. With --manager it registers with
Steward's manager under --name and reconciles only while it is the active instance; a
second instance is refused (ALREADY_EXISTS) unless it runs with --standby, in which case it
waits and takes over when the active one goes away.

It dials the informer and the manager with mutual TLS: --tls-ca-file, --tls-cert-file and
--tls-key-file, or STEWARD_TLS_CA_FILE, STEWARD_TLS_CERT_FILE and STEWARD_TLS_KEY_FILE
(eval "$(steward cluster env)" exports the admin's); --token-file or STEWARD_TOKEN_FILE
adds a bearer token. Plaintext needs --insecure-plaintext or STEWARD_INSECURE_PLAINTEXT=true
(development only); without either it exits 1 at once.

Spans go to OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (service steward-controller-NAME).

Flags:
`

func main() {
	fs := flag.NewFlagSet("confighash", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), usage, annotation)
		fs.PrintDefaults()
	}
	informer := fs.String("informer", "127.0.0.1:50061", "Steward informer address, host:port")
	manager := fs.String("manager", "", "Steward manager address, host:port (default: none, run alone)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig for writes (default: in-cluster, $KUBECONFIG or ~/.kube/config)")
	name := fs.String("name", "confighash", "controller name registered with the manager")
	namespace := fs.String("namespace", "", "watch only this namespace (default: all)")
	standby := fs.Bool("standby", false, "stand by when another instance holds the name, instead of exiting")
	workers := fs.Int("workers", 2, "concurrent reconciles")
	var security steward.SecurityConfig
	steward.AddSecurityFlags(fs, &security)
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fs.Usage()
		os.Exit(2)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err := run(security, *informer, *manager, *kubeconfig, *name, *namespace, *standby, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "confighash:", err)
		os.Exit(1)
	}
}

func run(security steward.SecurityConfig, informer, manager, kubeconfig, name, namespace string, standby bool, workers int) error {
	dial, err := steward.DialOptions(security)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	shutdown, err := steward.SetupTracing(ctx, "steward-controller-"+name)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer func() { _ = shutdown(context.Background()) }()

	cfg, err := kube.LoadConfig(kubeconfig)
	if err != nil {
		return err
	}
	api := kube.NewClient(cfg, "steward-controller-"+name)
	conn, err := grpc.NewClient(informer, dial...)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctrl, err := build(conn, api, name, steward.ControllerOptions{Namespace: namespace, MaxConcurrentReconciles: workers})
	if err != nil {
		return err
	}
	ctrl.Fence(api) // api's writes are refused while this instance holds no lease
	if manager == "" {
		return ctrl.Run(ctx)
	}
	mconn, err := grpc.NewClient(manager, dial...)
	if err != nil {
		return err
	}
	defer mconn.Close()
	err = ctrl.RunWithManager(ctx, mconn, steward.SessionOptions{Standby: standby})
	var refused *steward.RegistrationRefusedError
	if errors.As(err, &refused) {
		return fmt.Errorf("the manager refused %q (%s): %s; run with --standby to wait", name, refused.Code, refused.Message)
	}
	return err
}
