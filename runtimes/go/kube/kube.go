// Package kube is a small client for kube-apiserver: it reads a kubeconfig (client
// certificate, bearer token, token file, exec credential plugin) or the in-cluster service
// account, sends JSON requests with the caller's trace context
// (steward.TracingTransport), and reports API errors as *StatusError. It is enough for
// controllers that read from the informer and write with PATCH, POST, PUT and DELETE.
//
// # Credentials
//
// As client-go finds them: $KUBECONFIG may list several files, merged as clientcmd
// merges them (the first file to set a value wins); a token file is read again every
// TokenFileRefresh and after a 401; an exec credential plugin (ExecConfig) gives a token
// or a client certificate, kept until its expirationTimestamp or a 401. A request refused
// with a 401 is sent once more when that gave a different credential. See auth.go.
//
// # Write fence
//
// A client can be fenced: every write (any method but GET) asks the fence just before it
// is sent and, when the fence says no, is refused with a *FencedError (errors.Is(err,
// ErrFenced)) without sending anything. NewFencedClient fences a client for its whole
// life (steward's Host hands out only such clients, fenced by "this instance holds its
// controller's lease"); SetWriteFence (steward.Controller.Fence) sets a further fence
// that can be replaced or removed, which never lifts the construction-time one. A process paused
// past its lease (SIGSTOP, a stopped VM, a long GC) thus sends no write after it resumes,
// not even one that was already under way, while a standby has taken over. A fenced
// write is retryable: the active instance will make it.
//
// # Rate limit
//
// With Config.QPS above 0 every request first takes a token from a bucket that refills
// at QPS tokens a second and holds Config.Burst, full at the start (kube-controller-
// manager's --kube-api-qps and --kube-api-burst, 20 and 30 by default; client-go's
// token bucket rate limiter): a burst goes at once, then requests are paced at QPS, in
// the order they asked. Client.RateLimiterWaits reports the time they waited, by verb.
package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/steward-dev/steward/runtimes/go/internal/httptrace"
)

// Config is how to reach one API server.
type Config struct {
	// Server is the API server's URL, e.g. https://127.0.0.1:6443.
	Server string
	// TLS carries the CA, client certificate and server name.
	TLS *tls.Config
	// BearerToken, when set, is sent as Authorization: Bearer.
	BearerToken string
	// BearerTokenFile, when set, is a file holding the bearer token (a kubeconfig's
	// tokenFile, a pod's projected service account token): read again every
	// TokenFileRefresh and after a 401, so a rotated token is picked up. It wins over
	// BearerToken, which is used only while the file cannot be read.
	BearerTokenFile string
	// Exec, when set, is an exec credential plugin that gives the token or client
	// certificate (wins over the fields above); see ExecConfig.
	Exec *ExecConfig
	// QPS is how many requests a second the client sends on average (the host's
	// --kube-api-qps): every request first takes a token from a bucket that refills at
	// QPS tokens a second and holds Burst, full at the start, and waits for one when it
	// is empty, as client-go's rest client does. 0 or less: no limit (unlike client-go's
	// rest.Config, where 0 means 5). LoadConfig leaves it 0.
	QPS float64
	// Burst is the bucket's size (--kube-api-burst): how many requests go at once after a
	// quiet spell. At least 1 when QPS > 0.
	Burst int
}

type kubeconfigCluster struct {
	Server                   string `json:"server"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData string `json:"certificate-authority-data"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
	TLSServerName            string `json:"tls-server-name"`
	ProxyURL                 string `json:"proxy-url"`
	DisableCompression       bool   `json:"disable-compression"`
	Extensions               []struct {
		Name      string          `json:"name"`
		Extension json.RawMessage `json:"extension"`
	} `json:"extensions"`
}

type kubeconfigUser struct {
	ClientCertificate     string      `json:"client-certificate"`
	ClientCertificateData string      `json:"client-certificate-data"`
	ClientKey             string      `json:"client-key"`
	ClientKeyData         string      `json:"client-key-data"`
	Token                 string      `json:"token"`
	TokenFile             string      `json:"tokenFile"`
	Exec                  *ExecConfig `json:"exec"`
}

type kubeconfigContext struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}

type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string            `json:"name"`
		Cluster kubeconfigCluster `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string         `json:"name"`
		User kubeconfigUser `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string            `json:"name"`
		Context kubeconfigContext `json:"context"`
	} `json:"contexts"`
}

// fromFile is a kubeconfig entry with the file it came from (relative paths in it are
// relative to that file's directory).
type fromFile[T any] struct {
	v    T
	file string
}

// mergedKubeconfig is several kubeconfig files merged as client-go merges $KUBECONFIG:
// the first file to set current-context sets it, and the first file to define a
// cluster, user or context of a name defines it (later ones are ignored).
type mergedKubeconfig struct {
	currentContext string
	clusters       map[string]fromFile[kubeconfigCluster]
	users          map[string]fromFile[kubeconfigUser]
	contexts       map[string]fromFile[kubeconfigContext]
	files          []string
}

func (m *mergedKubeconfig) add(path string, kc *kubeconfig) {
	m.files = append(m.files, path)
	if m.currentContext == "" {
		m.currentContext = kc.CurrentContext
	}
	for _, c := range kc.Clusters {
		if _, ok := m.clusters[c.Name]; !ok {
			m.clusters[c.Name] = fromFile[kubeconfigCluster]{c.Cluster, path}
		}
	}
	for _, u := range kc.Users {
		if _, ok := m.users[u.Name]; !ok {
			m.users[u.Name] = fromFile[kubeconfigUser]{u.User, path}
		}
	}
	for _, c := range kc.Contexts {
		if _, ok := m.contexts[c.Name]; !ok {
			m.contexts[c.Name] = fromFile[kubeconfigContext]{c.Context, path}
		}
	}
}

// readKubeconfigs reads and merges paths in order. A file named explicitly (--kubeconfig)
// must exist; of a $KUBECONFIG list, missing files are skipped as client-go skips them,
// but at least one must exist.
func readKubeconfigs(paths []string, explicit bool) (*mergedKubeconfig, error) {
	m := &mergedKubeconfig{
		clusters: map[string]fromFile[kubeconfigCluster]{},
		users:    map[string]fromFile[kubeconfigUser]{},
		contexts: map[string]fromFile[kubeconfigContext]{},
	}
	seen := map[string]bool{}
	for _, path := range paths {
		if path == "" || seen[path] {
			continue
		}
		seen[path] = true
		raw, err := os.ReadFile(path)
		if err != nil {
			if !explicit && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		var kc kubeconfig
		if err := yaml.Unmarshal(raw, &kc); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
		m.add(path, &kc)
	}
	if len(m.files) == 0 {
		return nil, fmt.Errorf("kubeconfig: none of %s exists", strings.Join(paths, string(filepath.ListSeparator)))
	}
	return m, nil
}

// LoadConfig reads the API server's address and credentials: from the kubeconfig at
// path when given; else in-cluster (service account) when running in a pod; else from
// $KUBECONFIG (a list of files, merged as client-go merges them) or ~/.kube/config. It
// uses the kubeconfig's current context. Token files and exec credential plugins are
// not read here but by the client, at each request (see Config).
func LoadConfig(path string) (*Config, error) {
	paths, explicit := []string{path}, true
	if path == "" {
		if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
			return inCluster()
		}
		explicit = false
		if env := os.Getenv("KUBECONFIG"); env != "" {
			paths = filepath.SplitList(env)
		} else {
			home, _ := os.UserHomeDir()
			paths = []string{filepath.Join(home, ".kube", "config")}
		}
	}
	m, err := readKubeconfigs(paths, explicit)
	if err != nil {
		return nil, err
	}
	where := strings.Join(m.files, string(filepath.ListSeparator))
	ctx, ok := m.contexts[m.currentContext]
	if !ok || ctx.v.Cluster == "" {
		return nil, fmt.Errorf("kubeconfig %s: no context %q", where, m.currentContext)
	}
	cl, ok := m.clusters[ctx.v.Cluster]
	if !ok {
		return nil, fmt.Errorf("kubeconfig %s: no cluster %q", where, ctx.v.Cluster)
	}
	c, path := cl.v, cl.file
	dir := filepath.Dir(path)
	cfg := &Config{TLS: &tls.Config{MinVersion: tls.VersionTLS12}}
	cfg.Server = strings.TrimRight(c.Server, "/")
	cfg.TLS.ServerName = c.TLSServerName
	cfg.TLS.InsecureSkipVerify = c.InsecureSkipTLSVerify //nolint:gosec // the kubeconfig asks for it
	ca, err := material(c.CertificateAuthorityData, c.CertificateAuthority, dir)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: certificate authority: %w", path, err)
	}
	if ca != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("kubeconfig %s: no certificate in the certificate authority", path)
		}
		cfg.TLS.RootCAs = pool
	}
	u, ok := m.users[ctx.v.User]
	if !ok {
		return cfg, nil
	}
	path, dir = u.file, filepath.Dir(u.file)
	cert, err := material(u.v.ClientCertificateData, u.v.ClientCertificate, dir)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: client certificate: %w", path, err)
	}
	key, err := material(u.v.ClientKeyData, u.v.ClientKey, dir)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: client key: %w", path, err)
	}
	if cert != nil && key != nil {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: client certificate: %w", path, err)
		}
		cfg.TLS.Certificates = []tls.Certificate{pair}
	}
	cfg.BearerToken = u.v.Token
	if u.v.TokenFile != "" {
		cfg.BearerTokenFile = resolve(u.v.TokenFile, dir)
		if _, err := os.Stat(cfg.BearerTokenFile); err != nil && cfg.BearerToken == "" {
			return nil, fmt.Errorf("kubeconfig %s: token file: %w", path, err)
		}
	}
	if e := u.v.Exec; e != nil {
		x := *e
		if strings.ContainsRune(x.Command, filepath.Separator) {
			x.Command = resolve(x.Command, dir)
		}
		if x.ProvideClusterInfo {
			info := &ExecCluster{
				Server:                   c.Server,
				TLSServerName:            c.TLSServerName,
				InsecureSkipTLSVerify:    c.InsecureSkipTLSVerify,
				CertificateAuthorityData: ca,
				ProxyURL:                 c.ProxyURL,
				DisableCompression:       c.DisableCompression,
			}
			for _, ext := range c.Extensions {
				if ext.Name == "client.authentication.k8s.io/exec" {
					info.Config = ext.Extension
				}
			}
			x.Cluster = info
		}
		cfg.Exec = &x
	}
	return cfg, nil
}
func resolve(p, dir string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

func material(data, file, dir string) ([]byte, error) {
	if data != "" {
		return base64.StdEncoding.DecodeString(data)
	}
	if file != "" {
		return os.ReadFile(resolve(file, dir))
	}
	return nil, nil
}

// serviceAccountDir is where the kubelet mounts a pod's service account token and CA.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount/"

func inCluster() (*Config, error) { return inClusterFrom(serviceAccountDir) }

func inClusterFrom(sa string) (*Config, error) {
	tok, err := os.ReadFile(sa + "token")
	if err != nil {
		return nil, fmt.Errorf("in-cluster config: %w", err)
	}
	ca, err := os.ReadFile(sa + "ca.crt")
	if err != nil {
		return nil, fmt.Errorf("in-cluster config: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	host := net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	// The kubelet rotates the projected token: the client reads the file again every
	// TokenFileRefresh (rest.InClusterConfig's BearerTokenFile).
	return &Config{
		Server:          "https://" + host,
		TLS:             &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		BearerToken:     strings.TrimSpace(string(tok)),
		BearerTokenFile: sa + "token",
	}, nil
}

// StatusError is a response of the API server with a status code of 400 or more.
type StatusError struct {
	Code    int
	Reason  string
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("API server said %d %s: %s", e.Code, e.Reason, e.Message)
}

// IsNotFound reports whether err is a 404 from the API server.
func IsNotFound(err error) bool { return hasCode(err, http.StatusNotFound) }

// IsConflict reports whether err is a 409 from the API server (a stale resourceVersion,
// or an object that already exists).
func IsConflict(err error) bool { return hasCode(err, http.StatusConflict) }

func hasCode(err error, code int) bool {
	var s *StatusError
	return errors.As(err, &s) && s.Code == code
}

// ErrFenced is what every *FencedError is (errors.Is): a write refused by the client's
// write fence.
var ErrFenced = errors.New("write fenced")

// FencedError is a write refused before it was sent, because the client's write fence
// (Client.SetWriteFence) said no: this instance does not hold its controller's lease.
// Retryable: the active instance will make the write.
type FencedError struct {
	Method string
	Path   string
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("%s %s not sent: this instance does not hold its controller's lease (fenced)", e.Method, e.Path)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// IsFenced reports whether err is a write refused by the write fence.
func IsFenced(err error) bool { return errors.Is(err, ErrFenced) }

// Client sends requests to one API server. Each request is a client span in the
// caller's trace, and carries its traceparent. It is safe for concurrent use.
type Client struct {
	cfg       *Config
	http      *http.Client
	userAgent string

	limiter      *rateLimiter // nil: no limit
	creds        credentialSource
	conns        *connTracker
	cert         atomic.Pointer[tls.Certificate] // the exec plugin's client certificate
	sealed       func() bool                     // NewFencedClient's fence, for the client's whole life
	fence        atomic.Pointer[func() bool]
	fencedWrites atomic.Uint64
}

// NewFencedClient returns a client for cfg, identifying itself as userAgent, whose every
// write first asks fence (on the goroutine that sends it, just before it is sent) and is
// refused with a *FencedError, sending nothing, when fence returns false. That fence
// cannot be removed: SetWriteFence adds a further one (both must say yes). A nil fence
// panics.
func NewFencedClient(cfg *Config, userAgent string, fence func() bool) *Client {
	if fence == nil {
		panic("kube.NewFencedClient: nil fence")
	}
	c := NewClient(cfg, userAgent)
	c.sealed = fence
	return c
}

// Fenced reports whether the client was built with NewFencedClient, so that its writes
// are fenced whatever SetWriteFence is given.
func (c *Client) Fenced() bool { return c.sealed != nil }

func (c *Client) mayWrite() bool {
	if c.sealed != nil && !c.sealed() {
		return false
	}
	fence := c.fence.Load()
	return fence == nil || (*fence)()
}

// SetWriteFence makes every later write (any method but GET) first call fence, on the
// goroutine that sends it, just before it is sent, and fail with a *FencedError without
// sending anything when fence returns false; nil removes the fence. The fence of
// NewFencedClient stays in force either way. Safe to call while requests are in flight.
// See the package docs.
func (c *Client) SetWriteFence(fence func() bool) {
	if fence == nil {
		c.fence.Store(nil)
		return
	}
	c.fence.Store(&fence)
}

// FencedWrites is how many writes the write fence has refused.
func (c *Client) FencedWrites() uint64 { return c.fencedWrites.Load() }

// NewClient returns a client for cfg, identifying itself as userAgent, its requests
// limited by cfg.QPS and cfg.Burst. It panics when QPS > 0 and Burst < 1.
func NewClient(cfg *Config, userAgent string) *Client {
	c := &Client{
		cfg:       cfg,
		userAgent: userAgent,
		limiter:   newRateLimiter(cfg),
		creds:     newCredentialSource(cfg),
		conns:     &connTracker{dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}},
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLS != nil {
		tlsConfig = cfg.TLS.Clone()
	}
	if cfg.Exec != nil {
		// The plugin's certificate, when it gives one, else the kubeconfig's own.
		static := tlsConfig.Certificates
		tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert := c.cert.Load(); cert != nil {
				return cert, nil
			}
			if len(static) > 0 {
				return &static[0], nil
			}
			return &tls.Certificate{}, nil
		}
	}
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         c.conns.DialContext,
		TLSClientConfig:     tlsConfig,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
	c.http = &http.Client{Transport: httptrace.Transport(transport), Timeout: 60 * time.Second}
	return c
}

// authenticate sets req's credentials (Authorization, or the client certificate of the
// connection) and returns them, to tell the source about a 401.
func (c *Client) authenticate(ctx context.Context, req *http.Request) (*credentials, error) {
	if c.creds == nil {
		return nil, nil
	}
	cr, err := c.creds.get(ctx)
	if err != nil {
		return nil, err
	}
	if cr.token != "" {
		req.Header.Set("Authorization", "Bearer "+cr.token)
	} else {
		req.Header.Del("Authorization")
	}
	if cr.cert != nil {
		if old := c.cert.Swap(cr.cert); old != nil && old != cr.cert {
			// Open connections keep the old certificate: new ones shake hands anew.
			c.conns.closeAll()
		}
	}
	return cr, nil
}

// Do sends one request (body is marshalled to JSON unless it is nil or []byte) and
// decodes a 2xx response into out (unless out is nil). Other statuses are returned as
// *StatusError; a write refused by the write fence (SetWriteFence) is a *FencedError
// and sends nothing. With a rate limit (Config.QPS) the request first waits for a
// token; a wait that ctx ends, or that would pass its deadline, fails and sends
// nothing. The fence is asked after that wait, just before the request is sent.
func (c *Client) Do(ctx context.Context, method, path, contentType string, body, out any) error {
	var reader io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		reader = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.cfg.Server+path, reader)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if reader != nil {
		if contentType == "" {
			contentType = "application/json"
		}
		req.Header.Set("Content-Type", contentType)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if c.limiter != nil {
		if err := c.limiter.wait(ctx, method); err != nil {
			return err
		}
	}
	var resp *http.Response
	for attempt := 0; ; attempt++ {
		if method != http.MethodGet && !c.mayWrite() {
			c.fencedWrites.Add(1)
			p, _, _ := strings.Cut(path, "?")
			return &FencedError{Method: method, Path: p}
		}
		used, err := c.authenticate(ctx, req)
		if err != nil {
			return err
		}
		resp, err = c.http.Do(req)
		if err != nil {
			return err
		}
		// A 401: the credential is stale (a rotated token file, an expired plugin
		// credential). Kube-apiserver authenticates before anything else, so the request
		// did nothing: send it once more when a fresh credential is at hand.
		if resp.StatusCode != http.StatusUnauthorized || used == nil || attempt > 0 || !c.creds.refused(ctx, used) {
			break
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if req.GetBody != nil {
			if req.Body, err = req.GetBody(); err != nil {
				return err
			}
		}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 400 {
		var st struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(raw, &st)
		if st.Message == "" {
			st.Message = strings.TrimSpace(string(raw))
		}
		return &StatusError{Code: resp.StatusCode, Reason: st.Reason, Message: st.Message}
	}
	if out != nil && len(raw) > 0 {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// MergePatch sends a JSON merge patch (RFC 7386) to path.
func (c *Client) MergePatch(ctx context.Context, path string, patch, out any) error {
	return c.Do(ctx, http.MethodPatch, path, "application/merge-patch+json", patch, out)
}
