package provider_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ccmkit/ccmkit/provider"
	"github.com/ccmkit/ccmkit/registry"
)

// A failing Factory gives a nil Interface, whatever failed: the config or
// the name.
func TestFactoryErrorIsNilInterface(t *testing.T) {
	errConfig := errors.New("bad cloud-config")
	tests := []struct {
		name, provider string
		build          func(io.Reader) (provider.Config, error)
		want           error
	}{
		{"bad config", "kit", func(io.Reader) (provider.Config, error) { return provider.Config{}, errConfig }, errConfig},
		{"bad name", "Bad Name", func(io.Reader) (provider.Config, error) { return provider.Config{}, nil }, registry.ErrInvalidName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cloud, err := provider.Factory(tt.provider, tt.build)(nil)
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if cloud != nil {
				t.Errorf("cloud = %#v, want a nil Interface", cloud)
			}
		})
	}
}

// Factory passes the cloud-config to build and names the Cloud.
func TestFactoryBuilds(t *testing.T) {
	var got string
	cloud, err := provider.Factory("kit", func(config io.Reader) (provider.Config, error) {
		b, err := io.ReadAll(config)
		got = string(b)
		return provider.Config{ClusterID: true}, err
	})(strings.NewReader("zone: attic"))
	if err != nil {
		t.Fatal(err)
	}
	if got != "zone: attic" || cloud.ProviderName() != "kit" || !cloud.HasClusterID() {
		t.Errorf("build saw %q; cloud %q, HasClusterID %t; want the config, kit, true", got, cloud.ProviderName(), cloud.HasClusterID())
	}
}

// Register writes the provider name once: the registry's key and the
// Cloud's ProviderName are the same, and a bad name is refused at
// registration, before anything is built.
func TestRegisterNamesTheCloudOnce(t *testing.T) {
	r := registry.New()
	if err := provider.Register(r, "kit", func(io.Reader) (provider.Config, error) { return provider.Config{}, nil }); err != nil {
		t.Fatal(err)
	}
	cloud, err := r.Build("kit", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cloud.ProviderName(); got != "kit" {
		t.Errorf("ProviderName() = %q, want kit", got)
	}
	if err := provider.Register(r, "Bad Name", func(io.Reader) (provider.Config, error) { return provider.Config{}, nil }); !errors.Is(err, registry.ErrInvalidName) {
		t.Errorf("Register(Bad Name) = %v, want ErrInvalidName", err)
	}
	if err := provider.Register(r, "kit", func(io.Reader) (provider.Config, error) { return provider.Config{}, nil }); !errors.Is(err, registry.ErrDuplicate) {
		t.Errorf("the second Register(kit) = %v, want ErrDuplicate", err)
	}
}
