package loadbalancer

import (
	"fmt"
	"testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// TestModeIsChosenFromWhatTheClientDeclares pins which router mode New
// chooses: a client without a guard reads (UPnP), an igd.GuardedClient
// that reads is guarded (PCP with UPnP reads), one that says it cannot read
// (igd.Reader false) is blind; a client hidden behind a wrapper that
// declares nothing more than igd.Client reads.
func TestModeIsChosenFromWhatTheClientDeclares(t *testing.T) {
	for _, tt := range []struct {
		name   string
		client func(*env, *fake.PCPServer) igd.Client
		want   string
	}{
		{"UPnP client", func(e *env, _ *fake.PCPServer) igd.Client { return e.router.Client(addrA) }, "*loadbalancer.readingMode"},
		{"PCP backend with UPnP", func(e *env, s *fake.PCPServer) igd.Client { return pcpBackend(t, e.router, s, pcpSecret) }, "*loadbalancer.guardedMode"},
		{"PCP backend without UPnP", func(_ *env, s *fake.PCPServer) igd.Client { return blindBackend(t, s) }, "*loadbalancer.blindMode"},
		{"PCP backend behind a plain igd.Client", func(_ *env, s *fake.PCPServer) igd.Client { return struct{ igd.Client }{blindBackend(t, s)} }, "*loadbalancer.readingMode"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := envWithPCP(t, Config{}, fake.RouterConfig{}, fake.PCPConfig{AllowThirdParty: true}, tt.client)
			if got := fmt.Sprintf("%T", e.lb.mode); got != tt.want {
				t.Errorf("mode = %s, want %s", got, tt.want)
			}
		})
	}
}
