package edge

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

// TestGatewayProtocol builds the provider from a cloud-config naming a fake
// router (UPnP over HTTP on 127.0.0.1, PCP on 127.0.0.1:5351) and checks
// which protocol wrote the mapping: PCP stores the nonce as the
// description, UPnP ours ("ck1 ...").
func TestGatewayProtocol(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(base64.StdEncoding.EncodeToString([]byte(randomBytes(32)))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	node := cluster.Node("n1", cluster.Initialized(), cluster.InternalIP("192.168.1.2"))
	svc := cluster.Service("default", "web", cluster.Port("http", v1.ProtocolTCP, 8080, 30080),
		cluster.Annotation(loadbalancer.AnnotationLoadBalancerType, loadbalancer.AnnotationValue))
	for _, tt := range []struct {
		name        string
		config      string
		noPCP       bool // nothing listens on the PCP port
		wantDesc    string
		noUPnPCalls bool
	}{
		{name: "auto without a secret", config: "", wantDesc: "ck1 "},
		{name: "auto with a secret", config: "  pcpSecretFile: " + secret + "\n", wantDesc: "PCP MAP "},
		{name: "auto with a secret, no PCP server", config: "  pcpSecretFile: " + secret + "\n", noPCP: true, wantDesc: "ck1 "},
		{name: "upnp with a secret", config: "  protocol: upnp\n  pcpSecretFile: " + secret + "\n", wantDesc: "ck1 "},
		{name: "pcp", config: "  protocol: pcp\n  pcpSecretFile: " + secret + "\n", wantDesc: "PCP MAP "},
		{name: "pcp-only", config: "  protocol: pcp-only\n  pcpSecretFile: " + secret + "\n", wantDesc: "PCP MAP ", noUPnPCalls: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			router := fake.NewRouter(fake.RouterConfig{})
			srv := fake.NewServer(router, fake.ServerOptions{})
			t.Cleanup(srv.Close)
			if !tt.noPCP {
				conn, err := net.ListenPacket("udp4", "127.0.0.1:5351")
				if err != nil {
					t.Fatalf("the fake router's PCP port: %v", err)
				}
				s, err := fake.NewPCPServer(fake.PCPConfig{Router: router, Conn: conn, AllowThirdParty: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
			}
			cfg, err := ParseConfig(strings.NewReader("gateway:\n  url: " + srv.RootDescURL + "\n" + tt.config))
			if err != nil {
				t.Fatal(err)
			}
			cloud, err := New(cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			lb, _ := cloud.LoadBalancer()
			if _, err := lb.EnsureLoadBalancer(context.Background(), "kubernetes", svc, []*v1.Node{node}); err != nil {
				t.Fatalf("EnsureLoadBalancer: %v", err)
			}
			if n := len(router.Calls()); tt.noUPnPCalls && n != 0 {
				t.Errorf("%d UPnP calls, want none: %v", n, router.Calls())
			}
			ms := router.Mappings()
			if len(ms) != 1 || !strings.HasPrefix(ms[0].Description, tt.wantDesc) {
				t.Errorf("table %v, want one mapping described %q...", ms, tt.wantDesc)
			}
		})
	}
}

func TestGatewayProtocolSecretErrors(t *testing.T) {
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("too short"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, file, want string
	}{
		{name: "missing", file: filepath.Join(t.TempDir(), "none"), want: "edge: gateway.pcpSecretFile: open "},
		{name: "short", file: short, want: "edge: gateway.pcpSecretFile " + short + ": pcp: backend: BackendConfig.Secret is 9 bytes, must be at least 32"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConfig(strings.NewReader("gateway:\n  protocol: pcp\n  pcpSecretFile: " + tt.file + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := New(cfg, Options{}); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error starting %q", err, tt.want)
			}
		})
	}
}

// randomBytes returns n random bytes as a string.
func randomBytes(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return string(b)
}

// A PCP secret that could be guessed (a repeated character, zeros, a short
// pattern repeated, a run of the alphabet) is refused, with an error naming
// the key and saying how to make a random one; random secrets, raw or as
// base64 or hex, are taken.
func TestPCPSecretMustBeRandom(t *testing.T) {
	for _, tt := range []struct {
		name, secret string
		guessable    bool
	}{
		{name: "32 a", secret: strings.Repeat("a", 32), guessable: true},
		{name: "zeros", secret: string(make([]byte, 32)), guessable: true},
		{name: "zeros in hex", secret: strings.Repeat("0", 64), guessable: true},
		{name: "a pattern repeated", secret: strings.Repeat("0123456789abcdef", 2), guessable: true},
		{name: "two letters", secret: strings.Repeat("ab", 20), guessable: true},
		{name: "the alphabet", secret: "abcdefghijklmnopqrstuvwxyz0123456789", guessable: true},
		{name: "a word repeated", secret: strings.Repeat("password", 4), guessable: true},
		{name: "random bytes", secret: randomBytes(40)}, // white space at either end is trimmed
		{name: "random base64", secret: base64.StdEncoding.EncodeToString([]byte(randomBytes(32)))},
		{name: "random hex", secret: hex.EncodeToString([]byte(randomBytes(32)))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(file, append([]byte(tt.secret), '\n'), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := ParseConfig(strings.NewReader("gateway:\n  protocol: pcp\n  pcpSecretFile: " + file + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = New(cfg, Options{})
			switch {
			case !tt.guessable && err != nil:
				t.Errorf("New with a random secret: %v", err)
			case tt.guessable && err == nil:
				t.Errorf("New took the guessable secret %q", tt.secret)
			case tt.guessable && (!strings.HasPrefix(err.Error(), "edge: gateway.pcpSecretFile "+file+": ") || !strings.Contains(err.Error(), "head -c 32 /dev/urandom | base64")):
				t.Errorf("New = %v, want an error naming gateway.pcpSecretFile and saying how to make a random secret", err)
			case tt.guessable && bytes.Contains([]byte(err.Error()), []byte(tt.secret)):
				t.Errorf("the error quotes the secret: %v", err)
			}
		})
	}
}
