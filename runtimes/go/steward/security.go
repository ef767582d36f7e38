package steward

// Client security: how a controller dials Steward's informer and manager.
//
// Both serve mutual TLS only: the client checks the server's certificate against a CA
// and presents its own certificate, whose subject (common name = user, organizations =
// groups) is its identity unless it also sends a bearer token, which the server then
// verifies with a TokenReview. Plaintext is for development servers only and must be
// asked for explicitly. The settings and their environment variables are the Python
// runtime's (steward.security.ClientSecurity); see the README, section Security.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// The environment variables SecurityConfigFromEnv reads.
const (
	EnvTLSCAFile         = "STEWARD_TLS_CA_FILE"
	EnvTLSCertFile       = "STEWARD_TLS_CERT_FILE"
	EnvTLSKeyFile        = "STEWARD_TLS_KEY_FILE"
	EnvTokenFile         = "STEWARD_TOKEN_FILE"
	EnvTLSServerName     = "STEWARD_TLS_SERVER_NAME"
	EnvInsecurePlaintext = "STEWARD_INSECURE_PLAINTEXT"
)

// SecurityConfig says how to dial Steward's services. The zero value is invalid: give
// the three TLS files, or set InsecurePlaintext.
type SecurityConfig struct {
	// CAFile is the CA of the servers' certificates (PEM).
	CAFile string
	// CertFile is this client's certificate (PEM), presented for mutual TLS.
	CertFile string
	// KeyFile is its private key (PEM).
	KeyFile string
	// TokenFile holds a bearer token presented as the caller's identity instead of the
	// certificate's subject (a projected ServiceAccount token with audience "steward").
	// It is read again whenever it changes, and only ever sent over TLS. Optional.
	TokenFile string
	// ServerName is the name the server's certificate must carry, when it is not the
	// dialed host. Optional.
	ServerName string
	// InsecurePlaintext dials without TLS (development only). It excludes every other
	// setting: a token is never sent in plaintext.
	InsecurePlaintext bool
}

// SecurityConfigError means the settings are incomplete, contradictory, or name files
// that cannot be used.
type SecurityConfigError struct{ Message string }

func (e *SecurityConfigError) Error() string { return e.Message }

func configError(format string, args ...any) error {
	return &SecurityConfigError{Message: fmt.Sprintf(format, args...)}
}

func envTrue(name string) bool {
	v := os.Getenv(name)
	return v == "1" || v == "true"
}

// SecurityConfigFromEnv reads STEWARD_TLS_CA_FILE, STEWARD_TLS_CERT_FILE,
// STEWARD_TLS_KEY_FILE, STEWARD_TOKEN_FILE, STEWARD_TLS_SERVER_NAME and
// STEWARD_INSECURE_PLAINTEXT ("true" or "1" enables it). It does not validate;
// DialOptions does.
func SecurityConfigFromEnv() SecurityConfig {
	return SecurityConfig{
		CAFile:            os.Getenv(EnvTLSCAFile),
		CertFile:          os.Getenv(EnvTLSCertFile),
		KeyFile:           os.Getenv(EnvTLSKeyFile),
		TokenFile:         os.Getenv(EnvTokenFile),
		ServerName:        os.Getenv(EnvTLSServerName),
		InsecurePlaintext: envTrue(EnvInsecurePlaintext),
	}
}

// AddSecurityFlags registers --tls-ca-file, --tls-cert-file, --tls-key-file,
// --token-file, --tls-server-name and --insecure-plaintext on fs, filling cfg; each
// defaults to its environment variable (SecurityConfigFromEnv), as the Python runtime's
// flags do.
func AddSecurityFlags(fs *flag.FlagSet, cfg *SecurityConfig) {
	env := SecurityConfigFromEnv()
	fs.StringVar(&cfg.CAFile, "tls-ca-file", env.CAFile, "CA of the Steward services' certificates (default $"+EnvTLSCAFile+")")
	fs.StringVar(&cfg.CertFile, "tls-cert-file", env.CertFile, "client certificate for mutual TLS (default $"+EnvTLSCertFile+")")
	fs.StringVar(&cfg.KeyFile, "tls-key-file", env.KeyFile, "its key (default $"+EnvTLSKeyFile+")")
	fs.StringVar(&cfg.TokenFile, "token-file", env.TokenFile, "bearer token presented as this controller's identity, re-read when it changes (default $"+EnvTokenFile+")")
	fs.StringVar(&cfg.ServerName, "tls-server-name", env.ServerName, "name the services' certificates must carry, when not the dialed host (default $"+EnvTLSServerName+")")
	fs.BoolVar(&cfg.InsecurePlaintext, "insecure-plaintext", env.InsecurePlaintext, "dial without TLS, development only (default $"+EnvInsecurePlaintext+"=true)")
}

// Validate returns a *SecurityConfigError unless the settings can make a connection.
func (c SecurityConfig) Validate() error {
	files := []string{c.CAFile, c.CertFile, c.KeyFile}
	if c.InsecurePlaintext {
		if c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.TokenFile != "" {
			return configError("%s excludes TLS files and a token (a token is never sent in plaintext)", EnvInsecurePlaintext)
		}
		return nil
	}
	for _, f := range files {
		if f == "" {
			return configError("dialing Steward's services needs %s, %s and %s (mutual TLS), or %s=true (development only)",
				EnvTLSCAFile, EnvTLSCertFile, EnvTLSKeyFile, EnvInsecurePlaintext)
		}
	}
	return nil
}

func readPEM(path, what string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, configError("cannot read the %s %s: %v", what, path, unwrapPath(err))
	}
	if !strings.Contains(string(data), "-----BEGIN") {
		return nil, configError("the %s %s holds no PEM data", what, path)
	}
	return data, nil
}

// DialOptions are the grpc.DialOptions that secure a connection to Steward's services
// as cfg says: TLS 1.2 or later, the server checked against CAFile (and ServerName), the
// client certificate presented, and the token, if any, sent with every call.
//
// # Rotation
//
// The key pair is read again at every TLS handshake (grpc-go reconnects with a new
// handshake), so certificates rotated on disk are used without a restart; if the files
// are momentarily inconsistent (a certificate written before its key) the last good
// pair is kept. The CA is read once, here. The token file is re-read when it changes.
//
// It returns a *SecurityConfigError when the settings are incomplete or contradictory,
// or when a file cannot be read or parsed (naming the file), so a misconfigured
// controller fails at start rather than at its first call.
func DialOptions(cfg SecurityConfig) ([]grpc.DialOption, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.InsecurePlaintext {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	tlsConfig, err := clientTLSConfig(cfg)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig))}
	if cfg.TokenFile != "" {
		tokens := NewTokenCredentials(cfg.TokenFile)
		if _, err := tokens.GetRequestMetadata(context.Background()); err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tokens))
	}
	return opts, nil
}

func clientTLSConfig(cfg SecurityConfig) (*tls.Config, error) {
	ca, err := readPEM(cfg.CAFile, "server CA")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, configError("the server CA %s holds no certificate", cfg.CAFile)
	}
	pair := &keyPair{certFile: cfg.CertFile, keyFile: cfg.KeyFile}
	if _, err := pair.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		RootCAs:              pool,
		ServerName:           cfg.ServerName,
		GetClientCertificate: pair.get,
	}, nil
}

// keyPair is the client certificate, read from its files at each handshake.
type keyPair struct {
	certFile, keyFile string

	mu   sync.Mutex
	last *tls.Certificate
}

func (p *keyPair) load() (*tls.Certificate, error) {
	if _, err := readPEM(p.certFile, "client certificate"); err != nil {
		return nil, err
	}
	if _, err := readPEM(p.keyFile, "client key"); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		return nil, configError("the client certificate %s and key %s: %v", p.certFile, p.keyFile, err)
	}
	p.mu.Lock()
	p.last = &cert
	p.mu.Unlock()
	return &cert, nil
}

func (p *keyPair) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert, err := p.load()
	if err == nil {
		return cert, nil
	}
	p.mu.Lock()
	last := p.last
	p.mu.Unlock()
	if last == nil {
		return nil, err
	}
	slog.Warn("keeping the current client certificate", "error", err)
	return last, nil
}

// TokenCredentials send "authorization: Bearer <token>" with every call, the token read
// from a file and read again when the file's modification time or size changes (the
// kubelet rotates projected ServiceAccount tokens in place). They require transport
// security: grpc-go refuses to send them over a plaintext connection.
type TokenCredentials struct {
	path string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	token   string
}

// NewTokenCredentials returns credentials reading the token from path.
func NewTokenCredentials(path string) *TokenCredentials {
	return &TokenCredentials{path: path}
}

// GetRequestMetadata returns the authorization metadata, reading the file if it changed
// since the last call. An unreadable or empty file is a *SecurityConfigError, which
// fails the call (UNAVAILABLE) rather than sending it without the identity.
func (t *TokenCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	info, err := os.Stat(t.path)
	if err != nil {
		return nil, configError("cannot read the token %s: %v", t.path, unwrapPath(err))
	}
	if t.token == "" || !info.ModTime().Equal(t.modTime) || info.Size() != t.size {
		data, err := os.ReadFile(t.path)
		if err != nil {
			return nil, configError("cannot read the token %s: %v", t.path, unwrapPath(err))
		}
		token := strings.TrimSpace(string(data))
		if token == "" {
			return nil, configError("the token file %s is empty", t.path)
		}
		t.token, t.modTime, t.size = token, info.ModTime(), info.Size()
	}
	return map[string]string{"authorization": "Bearer " + t.token}, nil
}

// RequireTransportSecurity is true: a bearer token is only ever sent over TLS.
func (t *TokenCredentials) RequireTransportSecurity() bool { return true }

func unwrapPath(err error) error {
	var perr *os.PathError
	if errors.As(err, &perr) {
		return perr.Err
	}
	return err
}
