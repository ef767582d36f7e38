package steward

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// testCA issues certificates for the tests' servers and clients.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate and key (PEM) for cn: a server certificate for dnsNames,
// or a client certificate when there are none.
func (ca *testCA) issue(t *testing.T, cn string, dnsNames ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"steward-test"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     dnsNames,
	}
	if len(dnsNames) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

func writeFile(t *testing.T, path string, data []byte) string {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// seen is what the test server saw of one call.
type seen struct {
	commonName    string
	authorization string
}

// startMTLSServer serves the health service with mutual TLS (certificate for
// "steward.test", clients must present a certificate of ca), recording each caller.
func startMTLSServer(t *testing.T, ca *testCA) (string, <-chan seen) {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, "steward", "steward.test")
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	calls := make(chan seen, 16)
	record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var s seen
		if p, ok := peer.FromContext(ctx); ok {
			if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
				s.commonName = info.State.PeerCertificates[0].Subject.CommonName
			}
		}
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			s.authorization = strings.Join(md.Get("authorization"), ",")
		}
		calls <- s
		return handler(ctx, req)
	}
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{pair},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS12,
		})),
		grpc.UnaryInterceptor(record),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), calls
}

func check(t *testing.T, target string, cfg SecurityConfig) error {
	t.Helper()
	opts, err := DialOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func TestSecurityConfigErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	certPEM, keyPEM := ca.issue(t, "ctrl")
	caFile := writeFile(t, filepath.Join(dir, "ca.crt"), ca.pem)
	certFile := writeFile(t, filepath.Join(dir, "c.crt"), certPEM)
	keyFile := writeFile(t, filepath.Join(dir, "c.key"), keyPEM)
	garbage := writeFile(t, filepath.Join(dir, "garbage"), []byte("not pem"))
	missing := filepath.Join(dir, "missing.crt")

	cases := []struct {
		name string
		cfg  SecurityConfig
		want []string
	}{
		{"nothing", SecurityConfig{}, []string{EnvTLSCAFile, EnvTLSCertFile, EnvTLSKeyFile, EnvInsecurePlaintext + "=true", "development only"}},
		{"no key", SecurityConfig{CAFile: caFile, CertFile: certFile}, []string{"needs " + EnvTLSCAFile}},
		{"token without TLS", SecurityConfig{InsecurePlaintext: true, TokenFile: caFile}, []string{"never sent in plaintext"}},
		{"plaintext and files", SecurityConfig{InsecurePlaintext: true, CAFile: caFile, CertFile: certFile, KeyFile: keyFile}, []string{"excludes TLS files"}},
		{"missing CA", SecurityConfig{CAFile: missing, CertFile: certFile, KeyFile: keyFile}, []string{"server CA " + missing, "no such file"}},
		{"CA not PEM", SecurityConfig{CAFile: garbage, CertFile: certFile, KeyFile: keyFile}, []string{"server CA " + garbage + " holds no PEM data"}},
		{"key not PEM", SecurityConfig{CAFile: caFile, CertFile: certFile, KeyFile: garbage}, []string{"client key " + garbage}},
		{"key of another certificate", SecurityConfig{CAFile: caFile, CertFile: certFile, KeyFile: writeFile(t, filepath.Join(dir, "other.key"), func() []byte { _, k := ca.issue(t, "x"); return k }())}, []string{certFile, "private key does not match"}},
		{"missing token", SecurityConfig{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, TokenFile: missing}, []string{"token " + missing}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := DialOptions(tc.cfg)
			var cerr *SecurityConfigError
			if !errors.As(err, &cerr) {
				t.Fatalf("DialOptions = %v, %v; want a *SecurityConfigError", opts, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}

	if opts, err := DialOptions(SecurityConfig{InsecurePlaintext: true}); err != nil || len(opts) != 1 {
		t.Errorf("plaintext: %v, %v", opts, err)
	}
	if opts, err := DialOptions(SecurityConfig{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}); err != nil || len(opts) != 1 {
		t.Errorf("mTLS: %v, %v", opts, err)
	}
}

func TestSecurityConfigFromEnv(t *testing.T) {
	t.Setenv(EnvTLSCAFile, "/ca")
	t.Setenv(EnvTLSCertFile, "/c")
	t.Setenv(EnvTLSKeyFile, "/k")
	t.Setenv(EnvTokenFile, "/t")
	t.Setenv(EnvTLSServerName, "steward.test")
	t.Setenv(EnvInsecurePlaintext, "yes") // only "true" and "1" enable it, as in Python
	want := SecurityConfig{CAFile: "/ca", CertFile: "/c", KeyFile: "/k", TokenFile: "/t", ServerName: "steward.test"}
	if got := SecurityConfigFromEnv(); got != want {
		t.Errorf("SecurityConfigFromEnv() = %+v, want %+v", got, want)
	}
	for _, v := range []string{"true", "1"} {
		t.Setenv(EnvInsecurePlaintext, v)
		if !SecurityConfigFromEnv().InsecurePlaintext {
			t.Errorf("%s=%s did not enable plaintext", EnvInsecurePlaintext, v)
		}
	}
}

func TestTokenCredentialsRereadWhenChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	creds := NewTokenCredentials(path)
	if !creds.RequireTransportSecurity() {
		t.Fatal("a bearer token must require transport security")
	}
	if _, err := creds.GetRequestMetadata(context.Background()); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("missing file: %v, want an error naming it", err)
	}
	writeFile(t, path, []byte("first\n"))
	md, err := creds.GetRequestMetadata(context.Background())
	if err != nil || md["authorization"] != "Bearer first" {
		t.Fatalf("got %v, %v", md, err)
	}
	// Same file, unchanged: the cached token (even if its content changed in place with
	// the same size and time, which a rotation never does).
	writeFile(t, path, []byte("other\n"))
	stamp := time.Now().Add(-time.Minute)
	if err := os.Chtimes(path, stamp, stamp); err != nil {
		t.Fatal(err)
	}
	if md, _ = creds.GetRequestMetadata(context.Background()); md["authorization"] != "Bearer other" {
		t.Fatalf("changed mtime: %v, want the new token", md)
	}
	if err := os.WriteFile(path, []byte("rotated-longer"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, stamp, stamp); err != nil { // same time, new size
		t.Fatal(err)
	}
	if md, _ = creds.GetRequestMetadata(context.Background()); md["authorization"] != "Bearer rotated-longer" {
		t.Fatalf("changed size: %v, want the new token", md)
	}
	writeFile(t, path, []byte("  \n"))
	if _, err := creds.GetRequestMetadata(context.Background()); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty file: %v", err)
	}
}

func TestTokenNeverSentInPlaintext(t *testing.T) {
	path := writeFile(t, filepath.Join(t.TempDir(), "token"), []byte("secret"))
	conn, err := grpc.NewClient("127.0.0.1:1",
		append(mustDialOptions(t, SecurityConfig{InsecurePlaintext: true}), grpc.WithPerRPCCredentials(NewTokenCredentials(path)))...)
	if err != nil {
		// grpc-go refuses the combination when the channel is made ...
		if !strings.Contains(err.Error(), "transport level security") {
			t.Fatal(err)
		}
		return
	}
	defer conn.Close()
	// ... or, in other versions, at the call.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err == nil || !strings.Contains(err.Error(), "transport level security") {
		t.Fatalf("call with a token over plaintext: %v", err)
	}
}

func mustDialOptions(t *testing.T, cfg SecurityConfig) []grpc.DialOption {
	t.Helper()
	opts, err := DialOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

func TestMutualTLSTokenAndRotatedCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	target, calls := startMTLSServer(t, ca)
	certPEM, keyPEM := ca.issue(t, "controller-one")
	cfg := SecurityConfig{
		CAFile:     writeFile(t, filepath.Join(dir, "ca.crt"), ca.pem),
		CertFile:   writeFile(t, filepath.Join(dir, "tls.crt"), certPEM),
		KeyFile:    writeFile(t, filepath.Join(dir, "tls.key"), keyPEM),
		ServerName: "steward.test", // the certificate does not name 127.0.0.1
	}

	if err := check(t, target, cfg); err != nil {
		t.Fatalf("mTLS call: %v", err)
	}
	if got := <-calls; got.commonName != "controller-one" || got.authorization != "" {
		t.Errorf("server saw %+v, want the client certificate and no token", got)
	}

	// Without the ServerName override the server's certificate does not match the host.
	noName := cfg
	noName.ServerName = ""
	if err := check(t, target, noName); status.Code(err) != codes.Unavailable {
		t.Errorf("without the server name: %v, want UNAVAILABLE (certificate name mismatch)", err)
	}

	// A certificate of another CA is refused by the server.
	other := newTestCA(t)
	otherCert, otherKey := other.issue(t, "intruder")
	intruder := cfg
	intruder.CertFile = writeFile(t, filepath.Join(dir, "intruder.crt"), otherCert)
	intruder.KeyFile = writeFile(t, filepath.Join(dir, "intruder.key"), otherKey)
	if err := check(t, target, intruder); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}

	// The token goes with every call, re-read when the file changes.
	withToken := cfg
	withToken.TokenFile = writeFile(t, filepath.Join(dir, "token"), []byte("token-1\n"))
	opts := mustDialOptions(t, withToken)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := <-calls; got.authorization != "Bearer token-1" || got.commonName != "controller-one" {
		t.Errorf("server saw %+v, want token-1 over mTLS", got)
	}
	writeFile(t, withToken.TokenFile, []byte("token-2-rotated\n"))
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := <-calls; got.authorization != "Bearer token-2-rotated" {
		t.Errorf("server saw %+v after the token file changed", got)
	}

	// Rotated certificate files are used at the next handshake, with the same options.
	rotated, rotatedKey := ca.issue(t, "controller-two")
	writeFile(t, cfg.CertFile, rotated)
	writeFile(t, cfg.KeyFile, rotatedKey)
	conn2, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if _, err := healthpb.NewHealthClient(conn2).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := <-calls; got.commonName != "controller-two" {
		t.Errorf("server saw %+v, want the rotated certificate", got)
	}

	// A half-written rotation (a key that does not match) keeps the last good pair.
	_, strayKey := ca.issue(t, "stray")
	writeFile(t, cfg.KeyFile, strayKey)
	conn3, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn3.Close()
	if _, err := healthpb.NewHealthClient(conn3).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("with mismatched files on disk: %v", err)
	}
	if got := <-calls; got.commonName != "controller-two" {
		t.Errorf("server saw %+v, want the last good certificate", got)
	}
}
