package registry_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/registry"
)

// upstreamSeq makes names unique within the test binary: upstream's
// registry is process-global and cannot unregister, so no two tests (nor
// two runs under -count) may publish the same name.
var upstreamSeq atomic.Int64

func uniqueName(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("ccmkit-test-%d", upstreamSeq.Add(1))
	if cloudprovider.IsCloudProvider(name) {
		t.Fatalf("%q is already registered upstream", name)
	}
	return name
}

func TestPublishToUpstream(t *testing.T) {
	a, b := uniqueName(t), uniqueName(t)
	r := newRegistry(t, a, b)
	if err := r.PublishToUpstream(a, b); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{a, b} {
		if !cloudprovider.IsCloudProvider(name) {
			t.Errorf("%q is not registered upstream after PublishToUpstream", name)
		}
		c, err := cloudprovider.InitCloudProvider(name, "")
		if err != nil || c.ProviderName() != name {
			t.Errorf("upstream InitCloudProvider(%q) = %v, %v; want our provider", name, c, err)
		}
	}

	// Publishing again is an error, not a klog.Fatalf.
	if err := r.PublishToUpstream(a); !errors.Is(err, registry.ErrDuplicate) {
		t.Errorf("second PublishToUpstream = %v, want ErrDuplicate", err)
	}
	// So is publishing a name another registry already published.
	other := newRegistry(t, a)
	if err := other.PublishToUpstream(a); !errors.Is(err, registry.ErrDuplicate) {
		t.Errorf("PublishToUpstream from another registry = %v, want ErrDuplicate", err)
	}

	// Our registry stays authoritative: upstream construction follows it.
	r.Unregister(b)
	if _, err := cloudprovider.GetCloudProvider(b, nil); !errors.Is(err, registry.ErrUnknown) {
		t.Errorf("upstream GetCloudProvider after Unregister = %v, want ErrUnknown", err)
	}
}

func TestPublishToUpstreamConfigAndErrors(t *testing.T) {
	name := uniqueName(t)
	var got string
	r := registry.New()
	r.MustRegister(name, func(config io.Reader) (cloudprovider.Interface, error) {
		if config == nil {
			return nil, nil // must surface as ErrNilProvider
		}
		b, err := io.ReadAll(config)
		if err != nil {
			return nil, err
		}
		got = string(b)
		return &stubCloud{name: name}, nil
	})
	if err := r.PublishToUpstream(name); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cloud.conf")
	if err := os.WriteFile(path, []byte("zone: attic"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cloudprovider.InitCloudProvider(name, path); err != nil {
		t.Fatal(err)
	}
	if got != "zone: attic" {
		t.Errorf("factory read %q through upstream, want the file's content", got)
	}
	// Upstream formats the cause with %v, so only the text survives.
	_, err := cloudprovider.InitCloudProvider(name, "")
	if err == nil || !strings.Contains(err.Error(), registry.ErrNilProvider.Error()) {
		t.Errorf("upstream InitCloudProvider with a (nil, nil) factory = %v, want our nil-provider error", err)
	}
}

func TestPublishToUpstreamRejects(t *testing.T) {
	published := uniqueName(t)
	if err := newRegistry(t, published).PublishToUpstream(published); err != nil {
		t.Fatal(err)
	}
	fresh, missing := uniqueName(t), uniqueName(t)
	tests := []struct {
		desc    string
		names   []string
		wantErr []error
	}{
		{desc: "not in our registry", names: []string{fresh, missing}, wantErr: []error{registry.ErrUnknown}},
		{desc: "already upstream", names: []string{fresh, published}, wantErr: []error{registry.ErrDuplicate}},
		{desc: "repeated in the call", names: []string{fresh, fresh}, wantErr: []error{registry.ErrDuplicate}},
		{desc: "reserved external", names: []string{fresh, "external"}, wantErr: []error{registry.ErrInvalidName}},
		{desc: "every problem reported", names: []string{missing, published, "external"},
			wantErr: []error{registry.ErrUnknown, registry.ErrDuplicate, registry.ErrInvalidName}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			r := newRegistry(t, fresh, published, "external")
			err := r.PublishToUpstream(tt.names...)
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("PublishToUpstream(%q) = %v, want an error matching %v", tt.names, err, want)
				}
			}
			// All or nothing: the valid name was not published either.
			if cloudprovider.IsCloudProvider(fresh) {
				t.Fatalf("%q was published although the call failed", fresh)
			}
		})
	}
}

func TestPublishAllToUpstream(t *testing.T) {
	a, b := uniqueName(t), uniqueName(t)
	if err := newRegistry(t, a, b).PublishToUpstream(); err != nil {
		t.Fatal(err)
	}
	if !cloudprovider.IsCloudProvider(a) || !cloudprovider.IsCloudProvider(b) {
		t.Errorf("PublishToUpstream() without names did not publish every registered name")
	}
}

func TestPublishDefaultToUpstream(t *testing.T) {
	name := uniqueName(t)
	registry.MustRegister(name, stubFactory(name))
	t.Cleanup(func() { registry.Default().Unregister(name) })
	if err := registry.Default().PublishToUpstream(name); err != nil {
		t.Fatal(err)
	}
	if !cloudprovider.IsCloudProvider(name) {
		t.Errorf("%q not published from the default registry", name)
	}
}
