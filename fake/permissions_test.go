package fake_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// The router's permission lines decide, first match, as miniupnpd's do: a
// refused AddPortMapping is 606 and stores nothing; a mapping no line
// matches is allowed. The PCP side is held to miniupnpd by
// igd/pcp/pcpconformance (PreferFailure/RefusedPort).
func TestPermissionsRefuseAsMiniupnpd(t *testing.T) {
	lan := netip.MustParsePrefix("192.0.2.0/24")
	host := netip.MustParseAddr("192.0.2.10")
	high := igd.PortRange{First: 1024, Last: 65535}
	tests := []struct {
		name     string
		perms    []fake.Permission
		add      igd.Mapping
		wantCode int
		wantPort uint16
	}{{
		name:     "low port refused",
		perms:    []fake.Permission{{Allow: true, External: high, Client: lan, Internal: high}, {External: igd.AllPorts, Client: netip.MustParsePrefix("0.0.0.0/0"), Internal: igd.AllPorts}},
		add:      igd.Mapping{Protocol: igd.TCP, ExternalPort: 80, InternalClient: host, InternalPort: 30080},
		wantCode: upnp.CodeNotAuthorized,
	}, {
		name:     "high port allowed",
		perms:    []fake.Permission{{Allow: true, External: high, Client: lan, Internal: high}, {External: igd.AllPorts, Client: netip.MustParsePrefix("0.0.0.0/0"), Internal: igd.AllPorts}},
		add:      igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: host, InternalPort: 30080},
		wantPort: 8080,
	}, {
		name:     "no line matches: allowed",
		perms:    []fake.Permission{{External: high, Client: netip.MustParsePrefix("10.0.0.0/8"), Internal: high}},
		add:      igd.Mapping{Protocol: igd.TCP, ExternalPort: 80, InternalClient: host, InternalPort: 30080},
		wantPort: 80,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := fake.NewRouter(fake.RouterConfig{Permissions: tc.perms})
			c := r.Client(host)
			tc.add.Description, tc.add.Lease, tc.add.Enabled = "test", time.Hour, true
			got, err := c.AddPortMapping(tctx(t), tc.add)
			if tc.wantCode != 0 {
				if igd.Code(err) != tc.wantCode || !errors.Is(err, igd.ErrNotAuthorized) {
					t.Fatalf("add = %v, %v; want UPnP %d", got, err, tc.wantCode)
				}
				if ms := r.Mappings(); len(ms) != 0 {
					t.Errorf("table after a refusal: %v", ms)
				}
				return
			}
			if err != nil || got.ExternalPort != tc.wantPort {
				t.Fatalf("add = %v, %v; want port %d", got, err, tc.wantPort)
			}
		})
	}
}

// A PCP MAP without PREFER_FAILURE that the permission lines allow on no
// port is NOT_AUTHORIZED, as miniupnpd's CreatePCPMap_NAT answers once its
// search comes back to the suggested port; with one port allowed further up
// it takes that port.
func TestPCPPermissionsWithoutPreferFailure(t *testing.T) {
	denyAll := fake.Permission{External: igd.AllPorts, Client: netip.MustParsePrefix("0.0.0.0/0"), Internal: igd.AllPorts}
	for _, tc := range []struct {
		name     string
		perms    []fake.Permission
		wantPort uint16
		wantCode pcpwire.ResultCode
	}{
		{"nothing allowed", []fake.Permission{denyAll}, 0, pcpwire.NotAuthorized},
		{"one port allowed", []fake.Permission{{Allow: true, External: igd.PortRange{First: 9000, Last: 9000}, Client: netip.MustParsePrefix("127.0.0.0/8"), Internal: igd.AllPorts}, denyAll}, 9000, pcpwire.Success},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newPCP(t, fake.PCPConfig{Router: fake.NewRouter(fake.RouterConfig{Permissions: tc.perms})})
			got, err := pcpClient(t, s).Map(tctx(t), pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: 30080, ExternalPort: 80, Lifetime: time.Hour, Nonce: nonce})
			var re *pcpwire.ResultError
			switch {
			case tc.wantCode != pcpwire.Success && (!errors.As(err, &re) || re.Code != tc.wantCode):
				t.Fatalf("Map = %+v, %v; want %s", got, err, tc.wantCode)
			case tc.wantCode == pcpwire.Success && (err != nil || got.ExternalPort != tc.wantPort):
				t.Fatalf("Map = %+v, %v; want port %d", got, err, tc.wantPort)
			}
		})
	}
}
