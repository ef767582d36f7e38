package kube_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/steward-dev/steward/runtimes/go/kube"
)

// tokens is a local HTTP server that records the bearer token of each request and
// answers 401 to the tokens the test has revoked, as kube-apiserver does to an expired
// token: it observes what the client sends, it does not play the API server.
type tokens struct {
	srv     *httptest.Server
	mu      sync.Mutex
	seen    []string
	revoked map[string]bool
}

func newTokens(t *testing.T) *tokens {
	t.Helper()
	s := &tokens{revoked: map[string]bool{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		s.mu.Lock()
		s.seen = append(s.seen, tok)
		revoked := s.revoked[tok]
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if revoked {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"kind":"Status","reason":"Unauthorized","message":"Unauthorized"}`))
			return
		}
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *tokens) revoke(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked[tok] = true
}

func (s *tokens) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// credClock is a clock the test moves.
type credClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *credClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *credClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, c *kube.Client) error {
	t.Helper()
	return c.Do(context.Background(), http.MethodGet, "/api", "", nil, nil)
}

// kubeconfigFor writes a kubeconfig for server whose user is the YAML user block.
func kubeconfigFor(t *testing.T, dir, server, user string) string {
	t.Helper()
	path := filepath.Join(dir, "kubeconfig")
	writeFile(t, path, fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: c
contexts:
- name: c
  context: {cluster: k, user: u}
clusters:
- name: k
  cluster: {server: %q}
users:
- name: u
  user:
%s
`, server, user), 0o600)
	return path
}

func TestTokenFileIsReadAgain(t *testing.T) {
	s := newTokens(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	writeFile(t, tokenFile, "first\n", 0o600)
	cfg, err := kube.LoadConfig(kubeconfigFor(t, dir, s.srv.URL, "    tokenFile: token"))
	if err != nil {
		t.Fatal(err)
	}
	c := kube.NewClient(cfg, "steward-test")
	clock := &credClock{t: time.Now()}
	kube.SetCredentialClock(c, clock.now)

	if err := get(t, c); err != nil {
		t.Fatal(err)
	}
	// Rotated: within the minute the cached token is still sent, after it the new one.
	writeFile(t, tokenFile, "second\n", 0o600)
	if err := get(t, c); err != nil {
		t.Fatal(err)
	}
	clock.step(kube.TokenFileRefresh)
	if err := get(t, c); err != nil {
		t.Fatal(err)
	}
	// Rotated and the old one refused at once: the 401 makes the client read the file
	// again and send the request once more, which succeeds.
	writeFile(t, tokenFile, "third\n", 0o600)
	s.revoke("second")
	if err := get(t, c); err != nil {
		t.Fatalf("after a 401 with a rotated token file: %v", err)
	}
	// A 401 with nothing new in the file is the caller's: no loop.
	s.revoke("third")
	var st *kube.StatusError
	if err := get(t, c); !errors.As(err, &st) || st.Code != http.StatusUnauthorized {
		t.Fatalf("a 401 with the same token: %v, want a 401 StatusError", err)
	}
	want := []string{"first", "first", "second", "second", "third", "third"}
	if got := s.sent(); !slices.Equal(got, want) {
		t.Fatalf("the server saw the tokens %v, want %v", got, want)
	}
}

func TestInClusterTokenIsReadAgain(t *testing.T) {
	s := newTokens(t)
	dir := t.TempDir() + string(filepath.Separator)
	writeFile(t, dir+"ca.crt", "", 0o600)
	writeFile(t, dir+"token", "bound-1", 0o600)
	t.Setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "6443")
	cfg, err := kube.InClusterFrom(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != "https://127.0.0.1:6443" {
		t.Fatalf("server %q", cfg.Server)
	}
	cfg.Server = s.srv.URL // the recorder, in place of the Service's address
	c := kube.NewClient(cfg, "steward-test")
	clock := &credClock{t: time.Now()}
	kube.SetCredentialClock(c, clock.now)
	if err := get(t, c); err != nil {
		t.Fatal(err)
	}
	// The kubelet rotates the bound token: a minute on, the client sends the new one.
	writeFile(t, dir+"token", "bound-2", 0o600)
	clock.step(kube.TokenFileRefresh)
	if err := get(t, c); err != nil {
		t.Fatal(err)
	}
	// The file gone for a moment (the kubelet swaps a symlink): the last token is kept.
	if err := os.Remove(dir + "token"); err != nil {
		t.Fatal(err)
	}
	clock.step(kube.TokenFileRefresh)
	if err := get(t, c); err != nil {
		t.Fatal(err)
	}
	if want := []string{"bound-1", "bound-2", "bound-2"}; !slices.Equal(s.sent(), want) {
		t.Fatalf("the server saw the tokens %v, want %v", s.sent(), want)
	}
}

func TestKubeconfigListIsMerged(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	one, two := t.TempDir(), t.TempDir()
	first := filepath.Join(one, "first")
	second := filepath.Join(two, "second")
	// The first file sets current-context and the cluster; the second defines the
	// context, the user (its token file relative to the second file) and a cluster of
	// the same name, which the first one's hides, and another current-context, ignored.
	writeFile(t, first, `apiVersion: v1
kind: Config
current-context: merged
clusters:
- name: k
  cluster: {server: "https://first.example:6443/"}
`, 0o600)
	writeFile(t, second, `apiVersion: v1
kind: Config
current-context: other
contexts:
- name: merged
  context: {cluster: k, user: u}
- name: other
  context: {cluster: k, user: nobody}
clusters:
- name: k
  cluster: {server: "https://second.example:6443"}
users:
- name: u
  user: {tokenFile: tok}
`, 0o600)
	writeFile(t, filepath.Join(two, "tok"), "from-second", 0o600)
	t.Setenv("KUBECONFIG", strings.Join([]string{first, filepath.Join(one, "missing"), second}, string(filepath.ListSeparator)))
	cfg, err := kube.LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != "https://first.example:6443" {
		t.Errorf("server %q, want the first file's", cfg.Server)
	}
	if cfg.BearerTokenFile != filepath.Join(two, "tok") {
		t.Errorf("token file %q, want %q (relative to the file that names it)", cfg.BearerTokenFile, filepath.Join(two, "tok"))
	}
	// Neither file exists: an error that names them.
	t.Setenv("KUBECONFIG", filepath.Join(one, "missing"))
	if _, err := kube.LoadConfig(""); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("no kubeconfig file exists: %v", err)
	}
}

// A plugin that counts its runs in a file next to it, prints a token naming its
// argument, an environment variable and the run, valid until $EXPIRY when set, and
// keeps the KUBERNETES_EXEC_INFO it was given.
const countingPlugin = `#!/bin/sh
dir=$(dirname "$0")
n=$(( $(cat "$dir/runs" 2>/dev/null || echo 0) + 1 ))
echo $n > "$dir/runs"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$dir/info"
expiry=""
[ -n "$EXPIRY" ] && expiry=",\"expirationTimestamp\":\"$EXPIRY\""
printf '{"apiVersion":"client.authentication.k8s.io/%s","kind":"ExecCredential","status":{"token":"%s-%s-%d"%s}}' "$VERSION" "$1" "$GREETING" "$n" "$expiry"
`

func TestExecPluginToken(t *testing.T) {
	for _, version := range []string{"v1", "v1beta1"} {
		t.Run(version, func(t *testing.T) {
			s := newTokens(t)
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "plugin.sh"), countingPlugin, 0o755)
			expiry := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
			cfg, err := kube.LoadConfig(kubeconfigFor(t, dir, s.srv.URL, fmt.Sprintf(`    exec:
      apiVersion: client.authentication.k8s.io/%s
      command: ./plugin.sh
      args: [arg]
      env:
      - {name: GREETING, value: hello}
      - {name: VERSION, value: %s}
      - {name: EXPIRY, value: %q}
      interactiveMode: IfAvailable
      provideClusterInfo: true`, version, version, expiry.Format(time.RFC3339))))
			if err != nil {
				t.Fatal(err)
			}
			c := kube.NewClient(cfg, "steward-test")
			clock := &credClock{t: time.Now()}
			kube.SetCredentialClock(c, clock.now)

			for range 2 {
				if err := get(t, c); err != nil {
					t.Fatal(err)
				}
			}
			// Past its expirationTimestamp the plugin runs again.
			clock.step(time.Until(expiry) + time.Second)
			if err := get(t, c); err != nil {
				t.Fatal(err)
			}
			// Before the expiry again (every run gives the same one), a 401 runs it
			// again and sends the request once more.
			clock.step(-time.Until(expiry) - 2*time.Second)
			s.revoke("arg-hello-2")
			if err := get(t, c); err != nil {
				t.Fatalf("after a 401: %v", err)
			}
			want := []string{"arg-hello-1", "arg-hello-1", "arg-hello-2", "arg-hello-2", "arg-hello-3"}
			if got := s.sent(); !slices.Equal(got, want) {
				t.Fatalf("the server saw the tokens %v, want %v", got, want)
			}

			raw, err := os.ReadFile(filepath.Join(dir, "info"))
			if err != nil {
				t.Fatal(err)
			}
			var info struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Spec       struct {
					Interactive bool `json:"interactive"`
					Cluster     struct {
						Server string `json:"server"`
					} `json:"cluster"`
				} `json:"spec"`
			}
			if err := json.Unmarshal(raw, &info); err != nil {
				t.Fatalf("KUBERNETES_EXEC_INFO %q: %v", raw, err)
			}
			if info.APIVersion != "client.authentication.k8s.io/"+version || info.Kind != "ExecCredential" ||
				info.Spec.Interactive || info.Spec.Cluster.Server != s.srv.URL {
				t.Fatalf("KUBERNETES_EXEC_INFO = %s", raw)
			}
		})
	}
}

func TestExecPluginFailures(t *testing.T) {
	s := newTokens(t)
	cases := map[string]struct{ script, want string }{
		"exits non-zero": {"#!/bin/sh\necho 'no credentials for you' >&2\nexit 3\n", "no credentials for you"},
		"prints no credential": {
			"#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{}}'\n",
			"neither a token nor a client certificate",
		},
		"prints another version": {
			"#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"x\"}}'\n",
			"printed apiVersion",
		},
		"prints no JSON": {"#!/bin/sh\necho hello\n", "not an ExecCredential"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			plugin := filepath.Join(dir, "plugin.sh")
			writeFile(t, plugin, tc.script, 0o755)
			c := kube.NewClient(&kube.Config{Server: s.srv.URL, Exec: &kube.ExecConfig{
				Command: plugin, APIVersion: kube.ExecAPIVersionV1, InteractiveMode: "Never",
			}}, "steward-test")
			err := get(t, c)
			var execErr *kube.ExecError
			if !errors.As(err, &execErr) || !strings.Contains(err.Error(), plugin) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an ExecError naming %s and saying %q", err, plugin, tc.want)
			}
		})
	}
	// A command that does not exist: its install hint is shown.
	c := kube.NewClient(&kube.Config{Server: s.srv.URL, Exec: &kube.ExecConfig{
		Command: "steward-no-such-plugin", APIVersion: kube.ExecAPIVersionV1, InstallHint: "install it from example.com",
	}}, "steward-test")
	if err := get(t, c); err == nil || !strings.Contains(err.Error(), "steward-no-such-plugin") || !strings.Contains(err.Error(), "install it from example.com") {
		t.Fatalf("a missing plugin: %v", err)
	}
	if got := s.sent(); len(got) != 0 {
		t.Fatalf("requests without a credential reached the server: %v", got)
	}
}

// selfSigned makes a CA-less client certificate for commonName, as PEM.
func selfSigned(t *testing.T, commonName string) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
}

func TestExecPluginClientCertificate(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := ""
		if len(r.TLS.PeerCertificates) > 0 {
			cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		mu.Lock()
		seen = append(seen, cn)
		mu.Unlock()
		if cn != "second" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte("{}"))
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	// The plugin gives the certificate "first", then "second" on its next run.
	dir := t.TempDir()
	for i, cn := range []string{"first", "second"} {
		cert, key := selfSigned(t, cn)
		cred, _ := json.Marshal(map[string]any{
			"apiVersion": kube.ExecAPIVersionV1, "kind": "ExecCredential",
			"status": map[string]string{"clientCertificateData": cert, "clientKeyData": key},
		})
		writeFile(t, filepath.Join(dir, fmt.Sprintf("cred%d.json", i+1)), string(cred), 0o600)
	}
	plugin := filepath.Join(dir, "plugin.sh")
	writeFile(t, plugin, `#!/bin/sh
dir=$(dirname "$0")
n=$(( $(cat "$dir/runs" 2>/dev/null || echo 0) + 1 ))
echo $n > "$dir/runs"
cat "$dir/cred$n.json"
`, 0o755)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c := kube.NewClient(&kube.Config{
		Server: srv.URL,
		TLS:    &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		Exec:   &kube.ExecConfig{Command: plugin, APIVersion: kube.ExecAPIVersionV1},
	}, "steward-test")
	// "first" is refused; the plugin runs again and the request goes on a new
	// connection with "second".
	if err := get(t, c); err != nil {
		t.Fatalf("with the plugin's second certificate: %v", err)
	}
	if err := get(t, c); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"first", "second", "second"}; !slices.Equal(seen, want) {
		t.Fatalf("the server saw the client certificates %v, want %v", seen, want)
	}
}
