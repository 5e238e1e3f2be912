package registry

import (
	"errors"
	"fmt"
	"io"
	"sync"

	cloudprovider "k8s.io/cloud-provider"
)

// publishMu makes PublishToUpstream's check-then-register atomic with
// respect to other PublishToUpstream calls in this process. It cannot guard
// against code that calls cloudprovider.RegisterCloudProvider directly.
var publishMu sync.Mutex

// PublishToUpstream registers names from r in k8s.io/cloud-provider's
// global registry (cloudprovider.RegisterCloudProvider), so that the
// standard cloud-controller-manager command, which looks providers up with
// cloudprovider.InitCloudProvider, can build them. With no names, every
// name registered in r is published.
//
// Upstream's registry kills the process (klog.Fatalf) on a duplicate name;
// PublishToUpstream checks cloudprovider.IsCloudProvider first and returns
// an error matching ErrDuplicate instead. It also returns ErrUnknown for a
// name not registered in r and ErrInvalidName for "external", which
// upstream reserves and never looks up. The call is all or nothing: if any
// name is rejected, none is published, and the error lists every problem.
//
// What gets published for a name is a factory that looks the name up in r
// at construction time and builds it with r.Build: r stays authoritative
// (a later Unregister makes upstream construction fail with ErrUnknown) and
// a factory's (nil, nil) still comes back as ErrNilProvider.
//
// Upstream's registry is process-global and has no way to unregister, so a
// published name stays published for the life of the process: tests must
// publish unique names. Upstream also calls factories with its lock held,
// so a published factory must not call into upstream's registry itself.
func (r *Registry) PublishToUpstream(names ...string) error {
	publishMu.Lock()
	defer publishMu.Unlock()

	if len(names) == 0 {
		names = r.Names()
	}
	var errs []error
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		switch {
		case cloudprovider.IsExternal(name):
			errs = append(errs, fmt.Errorf("publish cloud provider %q upstream: %w: the name is reserved by k8s.io/cloud-provider for out-of-tree providers", name, ErrInvalidName))
		case !r.IsRegistered(name):
			errs = append(errs, fmt.Errorf("publish cloud provider %q upstream: %w", name, ErrUnknown))
		case seen[name] || cloudprovider.IsCloudProvider(name):
			errs = append(errs, fmt.Errorf("publish cloud provider %q upstream: %w", name, ErrDuplicate))
		}
		seen[name] = true
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, name := range names {
		cloudprovider.RegisterCloudProvider(name, func(config io.Reader) (cloudprovider.Interface, error) {
			return r.Build(name, config)
		})
	}
	return nil
}
