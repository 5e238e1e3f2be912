package registry

import (
	"io"

	cloudprovider "k8s.io/cloud-provider"
)

// defaultRegistry backs the package-level functions. It is never replaced.
var defaultRegistry = New()

// Default returns the registry the package-level functions use, for what
// they do not cover (Unregister, IsRegistered, PublishToUpstream) and for
// code that takes a *Registry. It always returns the same Registry.
func Default() *Registry { return defaultRegistry }

// Register adds factory under name in the default registry; see
// Registry.Register.
func Register(name string, factory cloudprovider.Factory) error {
	return defaultRegistry.Register(name, factory)
}

// MustRegister adds factory under name in the default registry and panics
// on error; see Registry.MustRegister. Use it from init functions.
func MustRegister(name string, factory cloudprovider.Factory) {
	defaultRegistry.MustRegister(name, factory)
}

// Names returns the names registered in the default registry, sorted.
func Names() []string { return defaultRegistry.Names() }

// Build constructs the named provider from the default registry; see
// Registry.Build.
func Build(name string, config io.Reader) (cloudprovider.Interface, error) {
	return defaultRegistry.Build(name, config)
}

// BuildFromFile constructs the named provider from the default registry
// with its configuration read from path; see Registry.BuildFromFile.
func BuildFromFile(name, path string) (cloudprovider.Interface, error) {
	return defaultRegistry.BuildFromFile(name, path)
}
