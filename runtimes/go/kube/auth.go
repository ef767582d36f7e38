package kube

// Credentials as client-go finds them: a static token, a token file read again every
// minute (client-go's cached file token source, transport/token_source.go, which
// rest.InClusterConfig and a kubeconfig's tokenFile use), and exec credential plugins
// (plugin/pkg/client/auth/exec/exec.go): a command that prints an ExecCredential with a
// bearer token or a client certificate, cached until its expirationTimestamp. A 401
// answer makes the credential stale at once: the token file is read again, the plugin
// run again, and the request that got the 401 is sent once more with the new credential.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// TokenFileRefresh is how long a token read from a file is used before the file is read
// again (client-go: one minute, half of the time between the kubelet's refresh of a
// projected service account token and its expiry).
const TokenFileRefresh = time.Minute

// The ExecCredential API versions a plugin may speak (client-go dropped v1alpha1).
const (
	ExecAPIVersionV1      = "client.authentication.k8s.io/v1"
	ExecAPIVersionV1beta1 = "client.authentication.k8s.io/v1beta1"
)

// ExecConfig is a kubeconfig user's exec credential plugin (users[].user.exec).
type ExecConfig struct {
	// Command is the program to run; a path with a separator in a kubeconfig is
	// relative to that kubeconfig's directory, a bare name is looked up in PATH.
	Command string   `json:"command"`
	Args    []string `json:"args"`
	// Env is added to this process's environment for the plugin.
	Env []ExecEnvVar `json:"env"`
	// APIVersion is the ExecCredential version the plugin speaks: ExecAPIVersionV1 or
	// ExecAPIVersionV1beta1.
	APIVersion string `json:"apiVersion"`
	// InstallHint is shown when the command cannot be found.
	InstallHint string `json:"installHint"`
	// ProvideClusterInfo puts the cluster (server, CA, ...) in KUBERNETES_EXEC_INFO.
	ProvideClusterInfo bool `json:"provideClusterInfo"`
	// InteractiveMode is Never, IfAvailable or Always. The plugin never gets a terminal
	// here (a controller runs unattended): Always is refused, the others run it with
	// spec.interactive false.
	InteractiveMode string `json:"interactiveMode"`

	// Cluster is what KUBERNETES_EXEC_INFO carries as spec.cluster when
	// ProvideClusterInfo is set (LoadConfig fills it from the kubeconfig's cluster).
	Cluster *ExecCluster `json:"-"`
}

// ExecEnvVar is one variable of ExecConfig.Env.
type ExecEnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ExecCluster is spec.cluster of the ExecCredential given to a plugin.
type ExecCluster struct {
	Server                   string          `json:"server"`
	TLSServerName            string          `json:"tls-server-name,omitempty"`
	InsecureSkipTLSVerify    bool            `json:"insecure-skip-tls-verify,omitempty"`
	CertificateAuthorityData []byte          `json:"certificate-authority-data,omitempty"`
	ProxyURL                 string          `json:"proxy-url,omitempty"`
	DisableCompression       bool            `json:"disable-compression,omitempty"`
	Config                   json.RawMessage `json:"config,omitempty"`
}

// credentials is what one request authenticates with.
type credentials struct {
	token string
	cert  *tls.Certificate
}

// credentialSource gives the current credentials and is told when the server refused
// them (401), so that the next get does not return them again.
type credentialSource interface {
	get(ctx context.Context) (*credentials, error)
	// refused marks c stale when it is still the current credential; it reports whether
	// a different credential is now at hand (worth sending the request again).
	refused(ctx context.Context, c *credentials) bool
}

func newCredentialSource(cfg *Config) credentialSource {
	switch {
	case cfg.Exec != nil:
		return &execSource{cfg: cfg.Exec, now: time.Now}
	case cfg.BearerTokenFile != "":
		return &fileTokenSource{path: cfg.BearerTokenFile, fallback: cfg.BearerToken, now: time.Now}
	case cfg.BearerToken != "":
		return staticSource{&credentials{token: cfg.BearerToken}}
	}
	return nil
}

type staticSource struct{ c *credentials }

func (s staticSource) get(context.Context) (*credentials, error)  { return s.c, nil }
func (s staticSource) refused(context.Context, *credentials) bool { return false }

// fileTokenSource reads a token file at most once a TokenFileRefresh and again after a
// 401. When the file cannot be read it keeps the last token it read (or the fallback,
// the kubeconfig's token), as client-go's caching token source does.
type fileTokenSource struct {
	path     string
	fallback string
	now      func() time.Time

	mu      sync.Mutex
	current *credentials
	readAt  time.Time
}

func (s *fileTokenSource) get(context.Context) (*credentials, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current != nil && s.now().Sub(s.readAt) < TokenFileRefresh {
		return s.current, nil
	}
	return s.readLocked()
}

func (s *fileTokenSource) readLocked() (*credentials, error) {
	raw, err := os.ReadFile(s.path)
	tok := strings.TrimSpace(string(raw))
	if err == nil && tok == "" {
		err = errors.New("the file is empty")
	}
	if err != nil {
		if s.current != nil {
			return s.current, nil
		}
		if s.fallback != "" {
			return &credentials{token: s.fallback}, nil
		}
		return nil, fmt.Errorf("token file %s: %w", s.path, err)
	}
	if s.current == nil || s.current.token != tok {
		s.current = &credentials{token: tok}
	}
	s.readAt = s.now()
	return s.current, nil
}

func (s *fileTokenSource) refused(_ context.Context, c *credentials) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c != s.current {
		return s.current != nil
	}
	fresh, err := s.readLocked()
	return err == nil && fresh != c
}

// execSource runs an exec credential plugin when it has no credential, when the last one
// expired, or after a 401.
type execSource struct {
	cfg *ExecConfig
	now func() time.Time

	mu      sync.Mutex
	current *credentials
	expiry  time.Time // zero: until a 401
}

// ExecError is an exec credential plugin that failed or printed no usable credential.
type ExecError struct {
	Command string
	Err     error
}

func (e *ExecError) Error() string {
	return fmt.Sprintf("exec credential plugin %s: %v", e.Command, e.Err)
}

func (e *ExecError) Unwrap() error { return e.Err }

func (s *execSource) get(ctx context.Context) (*credentials, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current != nil && (s.expiry.IsZero() || s.now().Before(s.expiry)) {
		return s.current, nil
	}
	if err := s.runLocked(ctx); err != nil {
		return nil, err
	}
	return s.current, nil
}

func (s *execSource) refused(ctx context.Context, c *credentials) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c != s.current {
		return s.current != nil // another request already ran the plugin again
	}
	s.current = nil
	return s.runLocked(ctx) == nil
}

// execCredential is an ExecCredential of either version (their fields agree).
type execCredential struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Cluster     *ExecCluster `json:"cluster,omitempty"`
		Interactive bool         `json:"interactive"`
	} `json:"spec"`
	Status *struct {
		ExpirationTimestamp   *time.Time `json:"expirationTimestamp"`
		Token                 string     `json:"token"`
		ClientCertificateData string     `json:"clientCertificateData"`
		ClientKeyData         string     `json:"clientKeyData"`
	} `json:"status,omitempty"`
}

func (s *execSource) runLocked(ctx context.Context) error {
	cfg := s.cfg
	fail := func(format string, args ...any) error {
		return &ExecError{Command: cfg.Command, Err: fmt.Errorf(format, args...)}
	}
	if cfg.APIVersion != ExecAPIVersionV1 && cfg.APIVersion != ExecAPIVersionV1beta1 {
		return fail("apiVersion %q is not supported (want %s or %s)", cfg.APIVersion, ExecAPIVersionV1, ExecAPIVersionV1beta1)
	}
	if cfg.InteractiveMode == "Always" {
		return fail("interactiveMode Always needs a terminal, and this process runs without one")
	}
	info := execCredential{APIVersion: cfg.APIVersion, Kind: "ExecCredential"}
	if cfg.ProvideClusterInfo {
		info.Spec.Cluster = cfg.Cluster
	}
	infoJSON, err := json.Marshal(info)
	if err != nil {
		return fail("KUBERNETES_EXEC_INFO: %w", err)
	}
	cmd := exec.CommandContext(ctx, cfg.Command, cfg.Args...) //nolint:gosec // the kubeconfig names it
	cmd.Env = os.Environ()
	for _, e := range cfg.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	cmd.Env = append(cmd.Env, "KUBERNETES_EXEC_INFO="+string(infoJSON))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var notFound *exec.Error
		if errors.As(err, &notFound) && cfg.InstallHint != "" {
			return fail("%w\n%s", err, cfg.InstallHint)
		}
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return fail("%w: %s", err, msg)
		}
		return fail("%w", err)
	}
	var out execCredential
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return fail("its output is not an ExecCredential: %w", err)
	}
	if out.APIVersion != cfg.APIVersion {
		return fail("configured for %s, it printed apiVersion %q", cfg.APIVersion, out.APIVersion)
	}
	if out.Status == nil {
		return fail("it printed no status")
	}
	st := out.Status
	c := &credentials{token: st.Token}
	hasCert, hasKey := st.ClientCertificateData != "", st.ClientKeyData != ""
	switch {
	case hasCert != hasKey:
		return fail("it printed a client certificate without its key, or a key without its certificate")
	case hasCert:
		pair, err := tls.X509KeyPair([]byte(st.ClientCertificateData), []byte(st.ClientKeyData))
		if err != nil {
			return fail("its client certificate: %w", err)
		}
		c.cert = &pair
	case st.Token == "":
		return fail("it printed neither a token nor a client certificate and key")
	}
	s.current = c
	s.expiry = time.Time{}
	if st.ExpirationTimestamp != nil {
		s.expiry = *st.ExpirationTimestamp
	}
	return nil
}

// connTracker remembers the connections a transport dialled, so that all of them can be
// closed when the client certificate changes (an open TLS connection keeps the
// certificate of its handshake), as client-go's connrotation dialer does.
type connTracker struct {
	dialer net.Dialer
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
}

type trackedConn struct {
	net.Conn
	t *connTracker
}

func (c *trackedConn) Close() error {
	c.t.mu.Lock()
	delete(c.t.conns, c)
	c.t.mu.Unlock()
	return c.Conn.Close()
}

func (t *connTracker) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := t.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: conn, t: t}
	t.mu.Lock()
	if t.conns == nil {
		t.conns = map[*trackedConn]struct{}{}
	}
	t.conns[tc] = struct{}{}
	t.mu.Unlock()
	return tc, nil
}

func (t *connTracker) closeAll() {
	t.mu.Lock()
	conns := make([]*trackedConn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}
