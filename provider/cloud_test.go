package provider_test

import (
	"errors"
	"strings"
	"testing"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/provider"
	"github.com/ccmkit/ccmkit/registry"
)

// allParts satisfies every part interface through embedded nil interfaces;
// the tests only check identity and never call a part's methods.
type allParts struct {
	cloudprovider.LoadBalancer
	cloudprovider.Instances
	cloudprovider.InstancesV2
	cloudprovider.Zones
	cloudprovider.Clusters
	cloudprovider.Routes
	id string // keeps distinct parts distinct under ==
}

func TestNewName(t *testing.T) {
	tests := []struct {
		name    string
		wantErr bool
	}{
		{name: "upnp"},
		{name: "home-lab-2"},
		{name: "", wantErr: true},
		{name: "UPnP", wantErr: true},
		{name: "2fast", wantErr: true},
		{name: "my_cloud", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := provider.New(tt.name, provider.Config{})
			if tt.wantErr {
				if !errors.Is(err, registry.ErrInvalidName) || c != nil {
					t.Fatalf("New(%q) = %v, %v; want nil and an error matching registry.ErrInvalidName", tt.name, c, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%q) = %v", tt.name, err)
			}
			if got := c.ProviderName(); got != tt.name {
				t.Errorf("ProviderName() = %q, want %q", got, tt.name)
			}
		})
	}
}

// accessors returns every accessor's result as (part, ok), by role name.
func accessors(c *provider.Cloud) map[string]func() (any, bool) {
	return map[string]func() (any, bool){
		"LoadBalancer": func() (any, bool) { p, ok := c.LoadBalancer(); return p, ok },
		"Instances":    func() (any, bool) { p, ok := c.Instances(); return p, ok },
		"InstancesV2":  func() (any, bool) { p, ok := c.InstancesV2(); return p, ok },
		"Zones":        func() (any, bool) { p, ok := c.Zones(); return p, ok },
		"Clusters":     func() (any, bool) { p, ok := c.Clusters(); return p, ok },
		"Routes":       func() (any, bool) { p, ok := c.Routes(); return p, ok },
	}
}

func TestAccessors(t *testing.T) {
	lb, inst, v2, zones, clusters, routes :=
		&allParts{id: "lb"}, &allParts{id: "inst"}, &allParts{id: "v2"},
		&allParts{id: "zones"}, &allParts{id: "clusters"}, &allParts{id: "routes"}
	var typedNil *allParts
	tests := []struct {
		desc string
		cfg  provider.Config
		want map[string]any // role → part; roles not listed must report false
	}{
		{desc: "nothing", cfg: provider.Config{}, want: map[string]any{}},
		{
			desc: "everything",
			cfg: provider.Config{LoadBalancer: lb, Instances: inst, InstancesV2: v2,
				Zones: zones, Clusters: clusters, Routes: routes},
			want: map[string]any{"LoadBalancer": lb, "Instances": inst, "InstancesV2": v2,
				"Zones": zones, "Clusters": clusters, "Routes": routes},
		},
		{
			desc: "load balancer and instances v2",
			cfg:  provider.Config{LoadBalancer: lb, InstancesV2: v2},
			want: map[string]any{"LoadBalancer": lb, "InstancesV2": v2},
		},
		{
			desc: "one value in two roles",
			cfg:  provider.Config{LoadBalancer: lb, InstancesV2: lb},
			want: map[string]any{"LoadBalancer": lb, "InstancesV2": lb},
		},
		{
			desc: "typed nils count as not given",
			cfg: provider.Config{LoadBalancer: typedNil, Instances: typedNil, InstancesV2: typedNil,
				Zones: typedNil, Clusters: typedNil, Routes: routes},
			want: map[string]any{"Routes": routes},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			c, err := provider.New("test", tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for role, get := range accessors(c) {
				got, ok := get()
				want, wantOK := tt.want[role]
				if ok != wantOK {
					t.Errorf("%s() ok = %v, want %v", role, ok, wantOK)
				}
				if !wantOK {
					// Not just a typed nil: the interface itself is nil.
					if got != nil {
						t.Errorf("%s() = %#v, want an untyped nil", role, got)
					}
					continue
				}
				if got != want {
					t.Errorf("%s() = %p, want %p", role, got, want)
				}
			}
		})
	}
}

func TestHasClusterID(t *testing.T) {
	for _, want := range []bool{false, true} {
		c, err := provider.New("test", provider.Config{ClusterID: want})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.HasClusterID(); got != want {
			t.Errorf("HasClusterID() = %v with Config.ClusterID %v", got, want)
		}
	}
}

func TestNewErrorNamesTheName(t *testing.T) {
	_, err := provider.New("Bad Name", provider.Config{})
	if err == nil || !strings.Contains(err.Error(), `"Bad Name"`) {
		t.Fatalf("New(%q) error = %v, want it to name the provider", "Bad Name", err)
	}
}

// ccmkit's InstancesV2 made for another provider name would give the
// cloud's nodes ProviderIDs of another scheme: New refuses it, naming both.
func TestNewRefusesInstancesV2OfAnotherName(t *testing.T) {
	nodes, err := provider.NewInstancesV2("home-lab", provider.InstancesV2Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := provider.New("homelab", provider.Config{InstancesV2: nodes})
	if err == nil || c != nil {
		t.Fatalf("New(homelab) with the InstancesV2 of home-lab = %v, %v; want an error", c, err)
	}
	if !errors.Is(err, registry.ErrNameMismatch) {
		t.Errorf("error = %v, want registry.ErrNameMismatch", err)
	}
	for _, s := range []string{`"homelab"`, `"home-lab"`, "InstancesV2"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
}
