package registry_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/registry"
)

// stubCloud is a minimal cloudprovider.Interface that supports nothing.
type stubCloud struct{ name string }

var _ cloudprovider.Interface = (*stubCloud)(nil)

func (*stubCloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (*stubCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool)                  { return nil, false }
func (*stubCloud) Instances() (cloudprovider.Instances, bool)                        { return nil, false }
func (*stubCloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return nil, false }
func (*stubCloud) Zones() (cloudprovider.Zones, bool)                                { return nil, false }
func (*stubCloud) Clusters() (cloudprovider.Clusters, bool)                          { return nil, false }
func (*stubCloud) Routes() (cloudprovider.Routes, bool)                              { return nil, false }
func (c *stubCloud) ProviderName() string                                            { return c.name }
func (*stubCloud) HasClusterID() bool                                                { return false }

// stubFactory returns a factory that builds a stubCloud named name.
func stubFactory(name string) cloudprovider.Factory {
	return func(io.Reader) (cloudprovider.Interface, error) { return &stubCloud{name: name}, nil }
}

// newRegistry returns a Registry holding a stub factory for each name.
func newRegistry(t testing.TB, names ...string) *registry.Registry {
	t.Helper()
	r := registry.New()
	for _, n := range names {
		if err := r.Register(n, stubFactory(n)); err != nil {
			t.Fatalf("Register(%q): %v", n, err)
		}
	}
	return r
}

func TestValidateName(t *testing.T) {
	tests := []struct {
		name    string
		wantErr bool
	}{
		{name: "a"},
		{name: "upnp"},
		{name: "my-cloud-2"},
		{name: "x9"},
		{name: "", wantErr: true},
		{name: "Upnp", wantErr: true},
		{name: "upNp", wantErr: true},
		{name: "1cloud", wantErr: true},
		{name: "-cloud", wantErr: true},
		{name: "my_cloud", wantErr: true},
		{name: "my.cloud", wantErr: true},
		{name: "my cloud", wantErr: true},
		{name: "cloud://", wantErr: true},
		{name: "clöud", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := registry.ValidateName(tt.name)
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("ValidateName(%q) = %v, want nil", tt.name, err)
				}
				return
			}
			if !errors.Is(err, registry.ErrInvalidName) {
				t.Fatalf("ValidateName(%q) = %v, want an error matching ErrInvalidName", tt.name, err)
			}
			if tt.name != "" && !strings.Contains(err.Error(), `"`+tt.name+`"`) {
				t.Errorf("ValidateName(%q) error %q does not name the offending name", tt.name, err)
			}
		})
	}
}

func TestRegister(t *testing.T) {
	tests := []struct {
		desc      string
		existing  []string
		name      string
		factory   cloudprovider.Factory
		wantErr   error
		wantNames []string
	}{
		{desc: "first", name: "upnp", factory: stubFactory("upnp"), wantNames: []string{"upnp"}},
		{desc: "second", existing: []string{"b"}, name: "a", factory: stubFactory("a"), wantNames: []string{"a", "b"}},
		{desc: "duplicate", existing: []string{"upnp"}, name: "upnp", factory: stubFactory("x"), wantErr: registry.ErrDuplicate, wantNames: []string{"upnp"}},
		{desc: "empty name", name: "", factory: stubFactory(""), wantErr: registry.ErrInvalidName, wantNames: []string{}},
		{desc: "invalid name", existing: []string{"a"}, name: "My_Cloud", factory: stubFactory("x"), wantErr: registry.ErrInvalidName, wantNames: []string{"a"}},
		{desc: "nil factory", name: "upnp", factory: nil, wantErr: registry.ErrNilFactory, wantNames: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			r := newRegistry(t, tt.existing...)
			err := r.Register(tt.name, tt.factory)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Register(%q) = %v, want %v", tt.name, err, tt.wantErr)
			}
			if err != nil && tt.name != "" && !strings.Contains(err.Error(), `"`+tt.name+`"`) {
				t.Errorf("Register(%q) error %q does not name the provider", tt.name, err)
			}
			if got := r.Names(); !slices.Equal(got, tt.wantNames) {
				t.Errorf("Names() = %q, want %q", got, tt.wantNames)
			}
			if tt.wantErr == registry.ErrDuplicate {
				// The first registration must have survived.
				c, err := r.Build(tt.name, nil)
				if err != nil || c.ProviderName() != tt.name {
					t.Errorf("after duplicate Register, Build(%q) = %v, %v; want the original provider", tt.name, c, err)
				}
			}
		})
	}
}

func TestMustRegister(t *testing.T) {
	r := newRegistry(t, "upnp")
	r.MustRegister("other", stubFactory("other"))
	if !r.IsRegistered("other") {
		t.Fatal("MustRegister did not register")
	}
	defer func() {
		err, ok := recover().(error)
		if !ok || !errors.Is(err, registry.ErrDuplicate) {
			t.Fatalf("MustRegister of a duplicate panicked with %v, want an error matching ErrDuplicate", err)
		}
	}()
	r.MustRegister("upnp", stubFactory("upnp"))
	t.Fatal("MustRegister of a duplicate did not panic")
}

func TestUnregister(t *testing.T) {
	r := newRegistry(t, "a", "b")
	if !r.Unregister("a") {
		t.Error(`Unregister("a") = false, want true`)
	}
	if r.Unregister("a") {
		t.Error(`second Unregister("a") = true, want false`)
	}
	if r.Unregister("never") {
		t.Error(`Unregister("never") = true, want false`)
	}
	if r.IsRegistered("a") || !r.IsRegistered("b") {
		t.Errorf("IsRegistered(a, b) = %v, %v; want false, true", r.IsRegistered("a"), r.IsRegistered("b"))
	}
	if _, err := r.Build("a", nil); !errors.Is(err, registry.ErrUnknown) {
		t.Errorf(`Build("a") after Unregister = %v, want ErrUnknown`, err)
	}
	// The name can be registered again.
	if err := r.Register("a", stubFactory("a")); err != nil {
		t.Errorf(`Register("a") after Unregister = %v`, err)
	}
}

func TestNames(t *testing.T) {
	r := newRegistry(t, "zeta", "alpha", "mid-2", "mid-10", "beta")
	want := []string{"alpha", "beta", "mid-10", "mid-2", "zeta"}
	got := r.Names()
	if !slices.Equal(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}
	got[0] = "mutated"
	if again := r.Names(); !slices.Equal(again, want) {
		t.Errorf("Names() after mutating a previous result = %q, want %q", again, want)
	}
	if got := registry.New().Names(); len(got) != 0 {
		t.Errorf("Names() of an empty registry = %q, want none", got)
	}
}

func TestBuild(t *testing.T) {
	errBoom := errors.New("boom")
	want := &stubCloud{name: "upnp"}
	tests := []struct {
		desc    string
		factory cloudprovider.Factory
		lookup  string // defaults to "upnp"
		wantErr error
		// wantInMsg are substrings the error message must contain.
		wantInMsg []string
	}{
		{
			desc:    "ok",
			factory: func(io.Reader) (cloudprovider.Interface, error) { return want, nil },
		},
		{
			desc:      "factory error is wrapped with the name",
			factory:   func(io.Reader) (cloudprovider.Interface, error) { return nil, errBoom },
			wantErr:   errBoom,
			wantInMsg: []string{`"upnp"`, "boom"},
		},
		{
			desc:    "factory error wins over a returned provider",
			factory: func(io.Reader) (cloudprovider.Interface, error) { return want, errBoom },
			wantErr: errBoom,
		},
		{
			desc:      "nil provider and nil error",
			factory:   func(io.Reader) (cloudprovider.Interface, error) { return nil, nil },
			wantErr:   registry.ErrNilProvider,
			wantInMsg: []string{`"upnp"`},
		},
		{
			desc:    "typed nil provider",
			factory: func(io.Reader) (cloudprovider.Interface, error) { return (*stubCloud)(nil), nil },
			wantErr: registry.ErrNilProvider,
		},
		{
			desc:      "unknown name lists registered names",
			factory:   func(io.Reader) (cloudprovider.Interface, error) { return want, nil },
			lookup:    "nope",
			wantErr:   registry.ErrUnknown,
			wantInMsg: []string{`"nope"`, "registered: other, upnp"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			r := newRegistry(t, "other")
			if err := r.Register("upnp", tt.factory); err != nil {
				t.Fatal(err)
			}
			name := tt.lookup
			if name == "" {
				name = "upnp"
			}
			got, err := r.Build(name, nil)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Build(%q) error = %v, want %v", name, err, tt.wantErr)
			}
			if err != nil {
				if got != nil {
					t.Errorf("Build(%q) returned provider %v together with error %v", name, got, err)
				}
				for _, s := range tt.wantInMsg {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("Build(%q) error %q does not contain %q", name, err, s)
					}
				}
				return
			}
			if got != want {
				t.Errorf("Build(%q) = %v, want the factory's provider %v", name, got, want)
			}
		})
	}
}

func TestZeroRegistry(t *testing.T) {
	var r registry.Registry
	if names := r.Names(); len(names) != 0 || r.IsRegistered("upnp") || r.Unregister("upnp") {
		t.Fatalf("zero Registry is not empty: Names() = %q", names)
	}
	if _, err := r.Build("upnp", nil); !errors.Is(err, registry.ErrUnknown) {
		t.Fatalf("Build on a zero Registry = %v, want ErrUnknown", err)
	}
	if err := r.Register("upnp", stubFactory("upnp")); err != nil {
		t.Fatalf("Register on a zero Registry = %v", err)
	}
	if c, err := r.Build("upnp", nil); err != nil || c.ProviderName() != "upnp" {
		t.Fatalf("Build after Register on a zero Registry = %v, %v", c, err)
	}
}

func TestBuildUnknownInEmptyRegistry(t *testing.T) {
	_, err := registry.New().Build("upnp", nil)
	if !errors.Is(err, registry.ErrUnknown) || !strings.Contains(err.Error(), "registered: none") {
		t.Fatalf("Build on an empty registry = %v, want ErrUnknown saying none are registered", err)
	}
}

// factoryCall records what a factory was given.
type factoryCall struct {
	config  io.Reader
	content string
}

// recordingFactory returns a factory that stores the reader it was given and
// its content in *got.
func recordingFactory(t *testing.T, got *factoryCall) cloudprovider.Factory {
	t.Helper()
	return func(config io.Reader) (cloudprovider.Interface, error) {
		got.config = config
		if config != nil {
			b, err := io.ReadAll(config)
			if err != nil {
				return nil, err
			}
			got.content = string(b)
		}
		return &stubCloud{name: "upnp"}, nil
	}
}

func TestBuildPassesConfig(t *testing.T) {
	var got factoryCall
	r := registry.New()
	r.MustRegister("upnp", recordingFactory(t, &got))
	if _, err := r.Build("upnp", strings.NewReader("gateway: 192.0.2.1\n")); err != nil {
		t.Fatal(err)
	}
	if got.content != "gateway: 192.0.2.1\n" {
		t.Errorf("factory read %q, want the config passed to Build", got.content)
	}
	got = factoryCall{}
	if _, err := r.Build("upnp", nil); err != nil {
		t.Fatal(err)
	}
	if got.config != nil {
		t.Errorf("factory got config %#v, want nil", got.config)
	}
}

func TestBuildFromFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cloud.conf")
	if err := os.WriteFile(path, []byte("[global]\nzone = home\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("file", func(t *testing.T) {
		var got factoryCall
		r := registry.New()
		r.MustRegister("upnp", recordingFactory(t, &got))
		c, err := registry.New().BuildFromFile("upnp", path)
		if !errors.Is(err, registry.ErrUnknown) || c != nil {
			t.Fatalf("BuildFromFile on an empty registry = %v, %v; want ErrUnknown", c, err)
		}
		if _, err := r.BuildFromFile("upnp", path); err != nil {
			t.Fatal(err)
		}
		if got.content != "[global]\nzone = home\n" {
			t.Errorf("factory read %q, want the file's content", got.content)
		}
		f, ok := got.config.(*os.File)
		if !ok {
			t.Fatalf("factory got %T, want *os.File", got.config)
		}
		if _, err := f.Read(make([]byte, 1)); !errors.Is(err, os.ErrClosed) {
			t.Errorf("reading the config after BuildFromFile returned: %v, want os.ErrClosed", err)
		}
	})

	t.Run("empty path means nil config", func(t *testing.T) {
		got := factoryCall{config: strings.NewReader("sentinel")}
		r := registry.New()
		r.MustRegister("upnp", recordingFactory(t, &got))
		if _, err := r.BuildFromFile("upnp", ""); err != nil {
			t.Fatal(err)
		}
		if got.config != nil {
			t.Errorf("factory got config %#v, want an untyped nil", got.config)
		}
	})

	t.Run("missing file", func(t *testing.T) {
		called := false
		r := registry.New()
		r.MustRegister("upnp", func(io.Reader) (cloudprovider.Interface, error) {
			called = true
			return &stubCloud{}, nil
		})
		missing := filepath.Join(dir, "missing.conf")
		_, err := r.BuildFromFile("upnp", missing)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("BuildFromFile with a missing file = %v, want fs.ErrNotExist", err)
		}
		if !strings.Contains(err.Error(), `"upnp"`) || !strings.Contains(err.Error(), missing) {
			t.Errorf("error %q should name the provider and the path", err)
		}
		if called {
			t.Error("factory was called although the config file could not be opened")
		}
	})

	t.Run("unknown name is checked before the file", func(t *testing.T) {
		_, err := newRegistry(t, "a").BuildFromFile("nope", filepath.Join(dir, "missing.conf"))
		if !errors.Is(err, registry.ErrUnknown) {
			t.Fatalf("BuildFromFile(unknown, missing) = %v, want ErrUnknown", err)
		}
	})

	t.Run("factory error", func(t *testing.T) {
		errBoom := errors.New("bad config")
		r := registry.New()
		var kept io.Reader
		r.MustRegister("upnp", func(config io.Reader) (cloudprovider.Interface, error) {
			kept = config
			return nil, errBoom
		})
		if _, err := r.BuildFromFile("upnp", path); !errors.Is(err, errBoom) {
			t.Fatalf("BuildFromFile = %v, want the factory's error", err)
		}
		if _, err := kept.(*os.File).Read(make([]byte, 1)); !errors.Is(err, os.ErrClosed) {
			t.Errorf("config file not closed after a failing factory: read = %v", err)
		}
	})
}

// TestDefaultRegistry exercises the package-level functions. The default
// registry is shared by the whole test binary, so the test uses its own
// names and removes them.
func TestDefaultRegistry(t *testing.T) {
	const name = "ccmkit-test-default"
	t.Cleanup(func() { registry.Default().Unregister(name) })

	if err := registry.Register(name, stubFactory(name)); err != nil {
		t.Fatal(err)
	}
	if err := registry.Register(name, stubFactory(name)); !errors.Is(err, registry.ErrDuplicate) {
		t.Errorf("second Register = %v, want ErrDuplicate", err)
	}
	if !registry.Default().IsRegistered(name) {
		t.Error("IsRegistered = false after Register")
	}
	if !slices.Contains(registry.Names(), name) {
		t.Errorf("Names() = %q, want it to contain %q", registry.Names(), name)
	}
	for _, build := range []func() (cloudprovider.Interface, error){
		func() (cloudprovider.Interface, error) { return registry.Build(name, nil) },
		func() (cloudprovider.Interface, error) { return registry.BuildFromFile(name, "") },
	} {
		c, err := build()
		if err != nil || c.ProviderName() != name {
			t.Errorf("build = %v, %v; want provider %q", c, err, name)
		}
	}
	func() {
		defer func() {
			if err, _ := recover().(error); !errors.Is(err, registry.ErrDuplicate) {
				t.Errorf("MustRegister of a duplicate panicked with %v, want ErrDuplicate", err)
			}
		}()
		registry.MustRegister(name, stubFactory(name))
	}()
	if !registry.Default().Unregister(name) || registry.Default().IsRegistered(name) {
		t.Error("Unregister did not remove the name")
	}
}

// A factory registered under one name that builds a provider named
// otherwise (registry.MustRegister("a", provider.Factory("b", ...))) is an
// error naming both, from Build and BuildFromFile: the name is the scheme of
// every ProviderID, and --cloud-provider would pick a provider of another.
func TestBuildRefusesAProviderNamedOtherwise(t *testing.T) {
	r := registry.New()
	r.MustRegister("homelab", stubFactory("home-lab"))
	for _, build := range []struct {
		op string
		f  func() (cloudprovider.Interface, error)
	}{
		{"Build", func() (cloudprovider.Interface, error) { return r.Build("homelab", nil) }},
		{"BuildFromFile", func() (cloudprovider.Interface, error) { return r.BuildFromFile("homelab", "") }},
	} {
		got, err := build.f()
		if err == nil {
			t.Errorf("%s(homelab) built %q with no error", build.op, got.ProviderName())
			continue
		}
		if got != nil {
			t.Errorf("%s(homelab) returned provider %v together with error %v", build.op, got, err)
		}
		if !errors.Is(err, registry.ErrNameMismatch) {
			t.Errorf("%s(homelab) error = %v, want ErrNameMismatch", build.op, err)
		}
		for _, s := range []string{`"homelab"`, `"home-lab"`} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s(homelab) error %q does not name %s", build.op, err, s)
			}
		}
	}
}
