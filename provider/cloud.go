package provider

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	"k8s.io/client-go/informers"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/registry"
)

var (
	_ cloudprovider.Interface    = (*Cloud)(nil)
	_ cloudprovider.InformerUser = (*Cloud)(nil)
)

// Config lists the parts a Cloud is made of. Every field is optional; the
// zero Config makes a provider that supports nothing. The Cloud keeps the
// parts it is given and does not copy them.
//
// A value given in several fields is one part: it is initialized, run and
// handed informers once. Two values are the same part when == says so,
// which for the usual pointer parts means the same pointer; values of a
// type that == cannot compare (a func, map or slice type, or a struct
// holding one) are never merged.
type Config struct {
	// LoadBalancer serves Services of type LoadBalancer. Nil (or a typed
	// nil): LoadBalancer() reports false and the service controller does
	// not run.
	LoadBalancer cloudprovider.LoadBalancer

	// Instances is the legacy node interface. Nil: Instances() reports
	// false. Prefer InstancesV2 in new code.
	Instances cloudprovider.Instances

	// InstancesV2 describes nodes (existence, shutdown, metadata). Nil:
	// InstancesV2() reports false. When set, the cloud-controller-manager
	// does not call Zones.
	InstancesV2 cloudprovider.InstancesV2

	// Zones reports failure domains (deprecated upstream in favour of
	// InstancesV2). Nil: Zones() reports false.
	Zones cloudprovider.Zones

	// Clusters lists clusters. Nil: Clusters() reports false.
	Clusters cloudprovider.Clusters

	// Routes programs pod network routes. Nil: Routes() reports false and
	// the route controller does not run.
	Routes cloudprovider.Routes

	// ClusterID is what HasClusterID reports: true when the provider is
	// configured with a cluster ID. False: the cloud-controller-manager
	// treats the cluster as untagged (it refuses to start unless
	// --allow-untagged-cloud is set).
	ClusterID bool

	// Logger is the logger put in the context handed to parts' Initialize
	// and Run, and the one the Cloud logs with. The zero value means
	// klog.Background().
	Logger klog.Logger
}

// Cloud is a cloudprovider.Interface made of the parts given to New. It is
// safe for concurrent use; create it with New, the zero Cloud is not
// usable.
type Cloud struct {
	name      string
	clusterID bool
	logger    klog.Logger

	loadBalancer cloudprovider.LoadBalancer
	instances    cloudprovider.Instances
	instancesV2  cloudprovider.InstancesV2
	zones        cloudprovider.Zones
	clusters     cloudprovider.Clusters
	routes       cloudprovider.Routes

	// parts are the distinct parts, each with the roles it fills, in the
	// order of Config's fields. Set by New, read-only afterwards.
	parts []part

	initOnce sync.Once
	// done is closed when every goroutine started by Initialize has
	// returned.
	done chan struct{}

	mu sync.Mutex
	// initErr joins the errors of parts whose Initialize failed.
	initErr error
}

// part is one distinct part and the roles it fills.
type part struct {
	value any
	roles []string
}

// describe names the part for errors and logs, e.g.
// "LoadBalancer+InstancesV2 (*loadbalancer.LoadBalancer)".
func (p part) describe() string {
	return fmt.Sprintf("%s (%T)", strings.Join(p.roles, "+"), p.value)
}

// New returns a Cloud named name made of the parts in cfg. The name is
// what ProviderName returns, and the scheme ("NAME://…") the parts should
// use for the ProviderIDs they report. New returns an error matching
// registry.ErrInvalidName if name breaks the rule of registry.ValidateName,
// and one matching registry.ErrNameMismatch if cfg.InstancesV2 is an
// *InstancesV2 made for another provider name.
func New(name string, cfg Config) (*Cloud, error) {
	if err := registry.ValidateName(name); err != nil {
		return nil, fmt.Errorf("new cloud provider: %w", err)
	}
	if iv, ok := cfg.InstancesV2.(*InstancesV2); ok && iv != nil && iv.providerName != name {
		return nil, fmt.Errorf("new cloud provider %q: %w: Config.InstancesV2 is NewInstancesV2's for provider %q, whose ProviderIDs are %q", name, registry.ErrNameMismatch, iv.providerName, iv.providerName+"://…")
	}
	c := &Cloud{
		name:      name,
		clusterID: cfg.ClusterID,
		logger:    cfg.Logger,
		done:      make(chan struct{}),
	}
	if c.logger.GetSink() == nil {
		c.logger = klog.Background()
	}
	// Typed nils become untyped nils here, so accessors can compare with nil.
	c.loadBalancer = addPart(c, "LoadBalancer", cfg.LoadBalancer)
	c.instances = addPart(c, "Instances", cfg.Instances)
	c.instancesV2 = addPart(c, "InstancesV2", cfg.InstancesV2)
	c.zones = addPart(c, "Zones", cfg.Zones)
	c.clusters = addPart(c, "Clusters", cfg.Clusters)
	c.routes = addPart(c, "Routes", cfg.Routes)
	return c, nil
}

// addPart records v in role, merging it with an earlier part that is the
// same value, and returns it; a nil or typed-nil v is not recorded and comes
// back as the untyped nil of T.
func addPart[T any](c *Cloud, role string, v T) T {
	if registry.IsNil(v) {
		var none T
		return none
	}
	for i := range c.parts {
		if sameValue(c.parts[i].value, v) {
			c.parts[i].roles = append(c.parts[i].roles, role)
			return v
		}
	}
	c.parts = append(c.parts, part{value: v, roles: []string{role}})
	return v
}

// ProviderName returns the name given to New.
func (c *Cloud) ProviderName() string { return c.name }

// HasClusterID returns Config.ClusterID.
func (c *Cloud) HasClusterID() bool { return c.clusterID }

// LoadBalancer returns Config.LoadBalancer and true, or nil and false if it
// was not given.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	return c.loadBalancer, c.loadBalancer != nil
}

// Instances returns Config.Instances and true, or nil and false if it was
// not given.
func (c *Cloud) Instances() (cloudprovider.Instances, bool) {
	return c.instances, c.instances != nil
}

// InstancesV2 returns Config.InstancesV2 and true, or nil and false if it
// was not given.
func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool) {
	return c.instancesV2, c.instancesV2 != nil
}

// Zones returns Config.Zones and true, or nil and false if it was not
// given.
func (c *Cloud) Zones() (cloudprovider.Zones, bool) {
	return c.zones, c.zones != nil
}

// Clusters returns Config.Clusters and true, or nil and false if it was not
// given.
func (c *Cloud) Clusters() (cloudprovider.Clusters, bool) {
	return c.clusters, c.clusters != nil
}

// Routes returns Config.Routes and true, or nil and false if it was not
// given.
func (c *Cloud) Routes() (cloudprovider.Routes, bool) {
	return c.routes, c.routes != nil
}

// SetInformers passes factory to every part that implements
// cloudprovider.InformerUser, once per distinct part however many roles it
// fills. The cloud-controller-manager calls it after Initialize. Every call
// is forwarded.
func (c *Cloud) SetInformers(factory informers.SharedInformerFactory) {
	for _, p := range c.parts {
		if u, ok := p.value.(cloudprovider.InformerUser); ok {
			u.SetInformers(factory)
		}
	}
}

// sameValue reports whether a and b are the same part: equal under ==,
// which for the usual pointer parts means the same pointer. Values that
// cannot be compared (a func, map or slice type, or a struct holding one)
// would make == panic; they are never the same as anything, so such a part
// filling two roles is initialized and run once per role.
func sameValue(a, b any) bool {
	if !reflect.ValueOf(a).Comparable() || !reflect.ValueOf(b).Comparable() {
		return false
	}
	return a == b
}
