package loadbalancer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	servicehelper "k8s.io/cloud-provider/service/helpers"
	"k8s.io/utils/clock"

	"github.com/ccmkit/ccmkit/igd"
)

// Defaults used when the corresponding Config field is zero, and bounds.
const (
	DefaultLease            = time.Hour        // Config.Lease 0
	MinLease                = time.Minute      // the shortest finite Config.Lease
	DefaultMaxRenewInterval = 5 * time.Minute  // bounds the default RenewInterval
	DefaultProbeInterval    = 5 * time.Second  // Config.ProbeInterval 0
	DefaultRetryAfter       = 10 * time.Second // Config.RetryAfter 0
	// PermanentLease as Config.Lease asks for permanent mappings, still
	// renewed: IGD:2 routers store "permanent" as igd.MaxLease (seven days).
	PermanentLease time.Duration = -1
	// ProbeAtRenewal as Config.ProbeInterval probes only as often as
	// leases are renewed (RenewInterval): no idle call between renewals,
	// for a router that announces its restarts (Config.Announcer).
	ProbeAtRenewal time.Duration = -1
)

// Annotations opting a Service in under AnnotatedServices: either key, AnnotationValue.
const (
	AnnotationLoadBalancerType       = "ccmkit.io/load-balancer-type"
	LegacyAnnotationLoadBalancerType = "midokura.com/load-balancer-type" // the original edge CCM's key
	AnnotationValue                  = "upnp-igd"
)

// ServiceSelection says which Services of type LoadBalancer are served.
type ServiceSelection int

const (
	// AnnotatedServices, the zero value, serves only the Services that opt
	// in (see AnnotationValue).
	AnnotatedServices ServiceSelection = iota
	// AllServices serves every Service of type LoadBalancer: any chart or
	// user creating one opens a port on the router.
	AllServices
)

// String returns "all" or "annotated".
func (s ServiceSelection) String() string {
	if s == AllServices || s == AnnotatedServices {
		return [...]string{"annotated", "all"}[s]
	}
	return fmt.Sprintf("ServiceSelection(%d)", int(s))
}

// MarshalText writes "annotated" or "all", and refuses any other value.
func (s ServiceSelection) MarshalText() ([]byte, error) {
	if s != AllServices && s != AnnotatedServices {
		return nil, fmt.Errorf("loadbalancer: %s is not AllServices or AnnotatedServices", s)
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads "annotated" or "all"; the error for any other text
// names them.
func (s *ServiceSelection) UnmarshalText(text []byte) error {
	switch string(text) {
	case "annotated":
		*s = AnnotatedServices
	case "all":
		*s = AllServices
	default:
		return errors.New(`must be "all" or "annotated"`)
	}
	return nil
}

// Config configures a LoadBalancer. Only Client is required; every other
// field has a documented meaning for its zero value.
type Config struct {
	// Client talks to the router. Required. It should bound each call itself
	// (igd.NewClient does): the service controller's calls carry no deadline.
	Client igd.Client

	// ClusterName is the cluster's name (--cluster-name), part of every
	// mapping's owner. Empty means the first call's clusterName argument,
	// which background work waits for; calls with another name fail.
	ClusterName string

	// Lease is the lease of every mapping, renewed by the background work.
	// Zero means DefaultLease; PermanentLease asks for permanent mappings. A
	// finite lease must be whole seconds between MinLease and igd.MaxLease.
	Lease time.Duration

	// RenewInterval is how often the background work renews leases, repairs
	// the router's table and refreshes the external IP: at most half the
	// lease. Zero means half the lease, at most DefaultMaxRenewInterval.
	RenewInterval time.Duration

	// ProbeInterval, at most RenewInterval, is how often the background work
	// reads one mapping this process wrote, in turn, and repairs every
	// Service when the router lost or changed it. Zero: DefaultProbeInterval;
	// ProbeAtRenewal: RenewInterval.
	ProbeInterval time.Duration

	// Announcer, when set, tells of router restarts as they happen (the
	// router's PCP ANNOUNCE: *pcp.Client is one): the background work
	// listens while it runs and starts a repair pass at each, instead of
	// waiting for a probe to find a mapping gone. Probes go on beside it,
	// for routers that announce nothing and announcements that are lost.
	Announcer Announcer

	// Pinholes, when set, opens the router's IPv6 firewall to a node's
	// global address (no NAT): Services whose spec.ipFamilies include IPv6
	// are then served on that family too, their IPv6 ingress the chosen
	// node's global address. Nil: the router opens no IPv6, and the IPv6
	// family is not served (an IPv6-only Service is invalid). Through a
	// client that does not declare AnyHostPinholes (UPnP), pinholes are
	// opened only to this process's own node (see NodeName), from port
	// 1024. With Pinholes, RenewInterval must be at most half a pinhole's
	// lease (Lease, at most MaxPinholeLease). A Service's status is the only
	// record of its pinholes: while background work runs, one its status
	// does not record yet is opened for four renewal intervals (at most the
	// lease), and for the lease once the status records it, so one that a
	// stopped process opened and no status recorded ends within minutes.
	Pinholes PinholeClient

	// AllowNonPublicExternalIP lets Services report a private or CGNAT
	// external IP (a router itself behind NAT). False makes them wait for a
	// public one, with a Warning event.
	AllowNonPublicExternalIP bool

	// Services selects the Services served. The zero value is
	// AnnotatedServices: a Service is exposed only when it opts in.
	Services ServiceSelection

	// Class, when not "", says a class controller (provider/lbclass) hands
	// this LoadBalancer the Services of that spec.loadBalancerClass, and
	// classless ones only with Classless. "" says the cloud-controller-
	// manager's service controller does, which hands it classless Services
	// only. Choosing the class is a Service's opt-in (Services selects among
	// classless ones). Background passes renew and repair, and arbitration
	// weighs, exactly the Services handed to this LoadBalancer: a classed
	// Service left out would not be repaired after a router reboot, and a
	// classless one another process serves would not be weighed.
	Class string
	// Classless: with Class, classless Services are handed over too.
	Classless bool
	// Finalizer marks the Services whose load balancer the caller set up;
	// background passes serve only those. "" = Class when Class is set (as
	// lbclass.Config.Finalizer), else service.kubernetes.io/load-balancer-
	// cleanup, the service controller's.
	Finalizer string

	// NodeName is the node this process runs on (the downward API's
	// spec.nodeName), used only with SecureMode (mappings target its
	// InternalIP) and with a Pinholes client that opens pinholes only to
	// this host (they go to its global IPv6 address). Empty means it is
	// found on first need, and kept: the one node reporting this host's
	// address toward the router (Client.LocalAddr) as InternalIP or
	// ExternalIP, and mappings target that address; else, through a
	// Pinholes client that says this host's IPv6 addresses
	// (OwnHostPinholes), the one reporting one of them, and mappings
	// target Client.LocalAddr still (its InternalIP when the router client
	// gives none). Until one matches, Services fail with ErrOwnNodeUnknown
	// and an api.RetryError.
	NodeName string

	// SecureMode says the router only lets a host map ports to itself
	// (miniupnpd secure_mode=yes): every mapping then targets this process's
	// node (see NodeName). False lets them target any eligible node.
	SecureMode bool

	// Admit, when set, is an operator's policy on which ports Services may
	// map (provider/edge's loadBalancer.allowedNamespaces and
	// allowedExternalPorts, for example). It is asked each time a Service is
	// served, with the keys of its spec, sorted, and returns why each key
	// it refuses may not be mapped (an error naming the limit); nil or a
	// key left out: admitted. A refused port gets PortErrorNotAdmitted and
	// loses the Service's mapping there; a Service refused a key does not
	// contend for it. It must not block: it is asked within a Service's
	// operation, and of other Services when arbitrating.
	Admit func(svc *v1.Service, keys []igd.Key) map[igd.Key]error

	// MaxMappings, when positive, caps the mappings all Services of this
	// LoadBalancer hold or are taking in this process, with (given
	// Initialize's client) the ports the Services' statuses record as
	// served: a Service that would map a key past it is refused that key
	// (PortErrorNotAdmitted) until another gives one up. Mappings a Service
	// already holds are kept and renewed. Zero: no cap. Statuses count the
	// mappings of Services this process has not served yet (after a
	// restart, or served by another process); one written late is not
	// counted until it is.
	MaxMappings int

	// RetryAfter is the fixed delay of the api.RetryError returned while the
	// cluster is not ready yet. Zero means DefaultRetryAfter.
	RetryAfter time.Duration

	// Clock drives the background work's timer. Nil means the real clock.
	Clock clock.WithTicker
}

// Announcer tells of router restarts: igd/pcp's Client, which hears the
// ANNOUNCE a PCP server multicasts when it starts, is one.
type Announcer interface {
	// ListenAnnounce listens until ctx ends, and returns nil then.
	ListenAnnounce(ctx context.Context) error
	// Restarts receives once per restart heard.
	Restarts() <-chan struct{}
}

// withDefaults validates c and returns it with every zero field filled in.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(field, reason string) {
		errs = append(errs, fmt.Errorf("loadbalancer: Config.%s: %s", field, reason))
	}
	if c.Client == nil {
		bad("Client", "is required")
	}
	switch {
	case c.Lease == 0:
		c.Lease = DefaultLease
	case c.Lease == PermanentLease:
	case c.Lease < MinLease || c.Lease > igd.MaxLease:
		bad("Lease", fmt.Sprintf("%s must be PermanentLease or between %s and %s", c.Lease, MinLease, igd.MaxLease))
	case c.Lease%time.Second != 0:
		bad("Lease", fmt.Sprintf("%s must be whole seconds", c.Lease))
	}
	eff := c.effectiveLease()
	switch {
	case c.RenewInterval == 0:
		c.RenewInterval = min(eff/2, DefaultMaxRenewInterval)
	case c.RenewInterval < 0 || c.RenewInterval > eff/2:
		bad("RenewInterval", fmt.Sprintf("%s must be positive and at most half the lease (%s)", c.RenewInterval, eff/2))
	}
	if c.Pinholes != nil && c.RenewInterval > c.pinholeLease()/2 {
		bad("RenewInterval", fmt.Sprintf("%s must be at most half a pinhole's lease (%s) with Pinholes set", c.RenewInterval, c.pinholeLease()/2))
	}
	switch {
	case c.ProbeInterval == 0:
		c.ProbeInterval = min(DefaultProbeInterval, c.RenewInterval)
	case c.ProbeInterval == ProbeAtRenewal:
		c.ProbeInterval = c.RenewInterval
	case c.ProbeInterval < 0 || (c.RenewInterval > 0 && c.ProbeInterval > c.RenewInterval):
		bad("ProbeInterval", fmt.Sprintf("%s must be positive and at most RenewInterval (%s)", c.ProbeInterval, c.RenewInterval))
	}
	if c.Class != "" {
		if errs := validation.IsDomainPrefixedPath(field.NewPath("Class"), c.Class); len(errs) > 0 {
			bad("Class", fmt.Sprintf("%q: %s", c.Class, errs.ToAggregate()))
		}
	} else if c.Classless {
		bad("Classless", "needs Class: without a class every Service handed over is classless")
	}
	switch {
	case c.Finalizer == "" && c.Class != "":
		c.Finalizer = c.Class
	case c.Finalizer == "":
		c.Finalizer = servicehelper.LoadBalancerCleanupFinalizer
	default:
		if errs := apivalidation.ValidateFinalizerName(c.Finalizer, field.NewPath("Finalizer")); len(errs) > 0 {
			bad("Finalizer", fmt.Sprintf("%q: %s", c.Finalizer, errs.ToAggregate()))
		}
	}
	if c.Services != AllServices && c.Services != AnnotatedServices {
		bad("Services", fmt.Sprintf("%s is not AllServices or AnnotatedServices", c.Services))
	}
	if c.MaxMappings < 0 {
		bad("MaxMappings", fmt.Sprintf("%d must not be negative (0: no cap)", c.MaxMappings))
	}
	switch {
	case c.RetryAfter == 0:
		c.RetryAfter = DefaultRetryAfter
	case c.RetryAfter < 0:
		bad("RetryAfter", fmt.Sprintf("%s must not be negative", c.RetryAfter))
	}
	c.Clock = cmp.Or(c.Clock, clock.WithTicker(clock.RealClock{}))
	return c, errors.Join(errs...)
}

// effectiveLease is how long a mapping lives on the router: the lease, or
// igd.MaxLease for a permanent one (IGD:2 routers cap it there).
func (c Config) effectiveLease() time.Duration {
	switch {
	case c.Lease == PermanentLease:
		return igd.MaxLease
	case c.Lease <= 0:
		return DefaultLease
	}
	return c.Lease
}

// requestLease is the lease sent with AddPortMapping: PermanentLease sends 0.
func (c Config) requestLease() time.Duration { return max(c.Lease, 0) }

// renewBelow is the lease left under which a mapping is renewed: half the
// lease plus half an interval, so that an interval later a quarter is left.
func (c Config) renewBelow() time.Duration {
	return c.effectiveLease()/2 + c.RenewInterval/2
}
