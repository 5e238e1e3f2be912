package registry

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"

	cloudprovider "k8s.io/cloud-provider"
)

// Errors returned by this package, wrapped with the operation and the
// provider name; test for them with errors.Is.
var (
	// ErrInvalidName means a provider name breaks the rule of ValidateName.
	ErrInvalidName = errors.New("invalid cloud provider name")
	// ErrNilFactory means Register was given a nil factory.
	ErrNilFactory = errors.New("nil cloud provider factory")
	// ErrDuplicate means the name is already registered (in this Registry,
	// or upstream for PublishToUpstream).
	ErrDuplicate = errors.New("cloud provider already registered")
	// ErrUnknown means no factory is registered under the name.
	ErrUnknown = errors.New("unknown cloud provider")
	// ErrNilProvider means a factory returned neither a provider nor an
	// error, or returned a typed nil pointer (or other nil value) as its
	// provider.
	ErrNilProvider = errors.New("cloud provider factory returned a nil provider and no error")
	// ErrNameMismatch means two places name one provider differently: a
	// factory built a provider whose ProviderName is not the name it is
	// registered under, or (provider.New) a part was made for another
	// provider name.
	ErrNameMismatch = errors.New("cloud provider factory built a provider of another name")
)

// Registry maps provider names to factories. It is safe for concurrent use.
// The zero value is an empty Registry ready to use, like the one New
// returns. A Registry must not be copied after first use.
type Registry struct {
	mu        sync.RWMutex
	factories map[string]cloudprovider.Factory
}

// New returns an empty Registry.
func New() *Registry {
	return &Registry{factories: make(map[string]cloudprovider.Factory)}
}

// Register adds factory under name. It returns an error matching
// ErrInvalidName if name breaks the rule of ValidateName, ErrNilFactory if
// factory is nil, and ErrDuplicate if name is already registered; the
// registry is unchanged in all three cases.
func (r *Registry) Register(name string, factory cloudprovider.Factory) error {
	if err := ValidateName(name); err != nil {
		return fmt.Errorf("register cloud provider: %w", err)
	}
	if factory == nil {
		return fmt.Errorf("register cloud provider %q: %w", name, ErrNilFactory)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, found := r.factories[name]; found {
		return fmt.Errorf("register cloud provider %q: %w", name, ErrDuplicate)
	}
	if r.factories == nil {
		r.factories = make(map[string]cloudprovider.Factory)
	}
	r.factories[name] = factory
	return nil
}

// MustRegister is like Register but panics if Register would return an
// error; the panic value is that error. It is meant for init functions,
// where a bad or duplicate name is a programming error.
func (r *Registry) MustRegister(name string, factory cloudprovider.Factory) {
	if err := r.Register(name, factory); err != nil {
		panic(err)
	}
}

// Unregister removes name and reports whether it was registered. Calls of
// Build that already looked the factory up are not affected.
func (r *Registry) Unregister(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, found := r.factories[name]
	delete(r.factories, name)
	return found
}

// IsRegistered reports whether a factory is registered under name.
func (r *Registry) IsRegistered(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, found := r.factories[name]
	return found
}

// Names returns the registered names in ascending order. The slice is a
// fresh copy that the caller may modify.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.factories))
}

// lookup returns the factory for name, or an error matching ErrUnknown that
// lists the registered names.
func (r *Registry) lookup(name string) (cloudprovider.Factory, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if f, found := r.factories[name]; found {
		return f, nil
	}
	registered := "none"
	if len(r.factories) > 0 {
		registered = strings.Join(slices.Sorted(maps.Keys(r.factories)), ", ")
	}
	return nil, fmt.Errorf("build cloud provider %q: %w (registered: %s)", name, ErrUnknown, registered)
}

// Build constructs the provider registered under name, passing config to
// its factory unchanged (nil means no configuration, as in upstream's
// InitCloudProvider). The factory runs without the registry's lock held,
// so it may take its time or even use the registry.
//
// Errors: ErrUnknown if name is not registered (the message lists the
// registered names); the factory's own error wrapped with the name;
// ErrNilProvider if the factory returned a nil provider without an error;
// and ErrNameMismatch if the provider's ProviderName is not name (the
// scheme of its nodes' ProviderIDs would not be the name it is run by).
// A nil provider is never returned with a nil error.
func (r *Registry) Build(name string, config io.Reader) (cloudprovider.Interface, error) {
	factory, err := r.lookup(name)
	if err != nil {
		return nil, err
	}
	return build(name, factory, config)
}

// BuildFromFile is Build with the configuration read from the file at
// path. The empty path means no configuration: the factory gets a nil
// reader, as upstream's InitCloudProvider does. Otherwise the factory gets
// the open *os.File, which is closed when the factory returns; a factory
// must not keep it. The name is looked up before the file is opened.
func (r *Registry) BuildFromFile(name, path string) (cloudprovider.Interface, error) {
	factory, err := r.lookup(name)
	if err != nil {
		return nil, err
	}
	if path == "" {
		// An untyped nil, so that factories can test config == nil.
		return build(name, factory, nil)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("build cloud provider %q: open config: %w", name, err)
	}
	// Closing a file opened read-only reports nothing the caller could act on.
	defer func() { _ = f.Close() }()
	return build(name, factory, f)
}

// build calls factory and enforces the never-(nil, nil) contract and the
// provider's name.
func build(name string, factory cloudprovider.Factory, config io.Reader) (cloudprovider.Interface, error) {
	cloud, err := factory(config)
	if err != nil {
		return nil, fmt.Errorf("build cloud provider %q: %w", name, err)
	}
	if IsNil(cloud) {
		return nil, fmt.Errorf("build cloud provider %q: %w", name, ErrNilProvider)
	}
	if got := cloud.ProviderName(); got != name {
		return nil, fmt.Errorf("build cloud provider %q: %w: its ProviderName is %q; register it under its own name, or write the name once with provider.Register", name, ErrNameMismatch, got)
	}
	return cloud, nil
}

// IsNil reports whether v is nil or holds a nil pointer, map, slice, func,
// channel or interface. A provider such as (*myCloud)(nil) stored in a
// cloudprovider.Interface is not == nil, yet calling it would panic:
// Register and Build treat it as no provider, and provider and fake/cluster
// treat parts and clouds the same way.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
