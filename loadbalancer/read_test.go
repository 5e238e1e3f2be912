package loadbalancer

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// No listing of a Service's keys spans more than upnp.SafeListWidth ports
// (why: igd/DESIGN.md).
func TestReadListsNarrowRanges(t *testing.T) {
	for _, tt := range []struct {
		name string
		keys []igd.Key
		want []string
	}{
		{"one key", []igd.Key{k(igd.TCP, 80)}, []string{"TCP 80-80"}},
		{"adjacent", []igd.Key{k(igd.TCP, 80), k(igd.TCP, 81), k(igd.TCP, 207)}, []string{"TCP 80-207"}},
		{"one past the width", []igd.Key{k(igd.TCP, 80), k(igd.TCP, 208)}, []string{"TCP 80-80", "TCP 208-208"}},
		{"protocols apart", []igd.Key{k(igd.TCP, 80), k(igd.UDP, 80)}, []string{"TCP 80-80", "UDP 80-80"}},
		{"far apart", []igd.Key{k(igd.TCP, 80), k(igd.TCP, 443), k(igd.TCP, 8080), k(igd.TCP, 8081)}, []string{"TCP 80-80", "TCP 443-443", "TCP 8080-8081"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{})
			var got []string
			l := rangeRecorder{Client: e.router.Client(addrA), seen: &got}
			lb, err := New(Config{Client: l})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lb.read(context.Background(), owner{}, tt.keys); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("listed ranges = %q, want %q", got, tt.want)
			}
		})
	}
}

// rangeRecorder records the ranges listed through it.
type rangeRecorder struct {
	*fake.Client
	seen *[]string
}

func (r rangeRecorder) ListPortMappings(ctx context.Context, proto igd.Protocol, ports igd.PortRange) ([]igd.Mapping, error) {
	*r.seen = append(*r.seen, fmt.Sprintf("%s %d-%d", proto, ports.First, ports.Last))
	return r.Client.ListPortMappings(ctx, proto, ports)
}

func k(p igd.Protocol, port uint16) igd.Key { return igd.Key{Protocol: p, ExternalPort: port} }
