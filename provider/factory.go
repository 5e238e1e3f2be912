package provider

import (
	"fmt"
	"io"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/registry"
)

// Register registers in r, under name, a factory of the Cloud named name
// built from the Config build returns for the cloud-config (config is nil
// when there is no file): the name is written once, so the name the
// provider is run by and the Cloud's ProviderName (the scheme of its nodes'
// ProviderIDs) are the same. Errors are r.Register's: ErrInvalidName,
// ErrDuplicate, and ErrNilFactory when build is nil.
func Register(r *registry.Registry, name string, build func(config io.Reader) (Config, error)) error {
	if build == nil {
		return fmt.Errorf("register cloud provider %q: %w", name, registry.ErrNilFactory)
	}
	return r.Register(name, Factory(name, build))
}

// MustRegister is Register in the default registry (registry.Default()),
// panicking with Register's error; it is meant for init functions.
func MustRegister(name string, build func(config io.Reader) (Config, error)) {
	if err := Register(registry.Default(), name, build); err != nil {
		panic(err)
	}
}

// Factory returns a cloudprovider.Factory that builds the Cloud named name
// from the Config build returns for the cloud-config (config is nil when
// there is no file). The Cloud comes back as a cloudprovider.Interface; on
// error, build's or New's, the Interface is nil (never a nil *Cloud in a
// non-nil Interface). build must not be nil. To register it, use Register
// or MustRegister, which write the name once; registered by hand under
// another name, the registry refuses to build it (registry.ErrNameMismatch).
func Factory(name string, build func(config io.Reader) (Config, error)) cloudprovider.Factory {
	return func(config io.Reader) (cloudprovider.Interface, error) {
		cfg, err := build(config)
		if err != nil {
			return nil, err
		}
		cloud, err := New(name, cfg)
		if err != nil {
			return nil, err
		}
		return cloud, nil
	}
}
