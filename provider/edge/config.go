package edge

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/ccmkit/ccmkit/igd"
)

// Defaults of the cloud-config, applied to every key that is absent or null.
const (
	DefaultDiscoveryTimeout = 3 * time.Second
	DefaultCallTimeout      = 2 * time.Second
	DefaultLease            = time.Hour
	DefaultServices         = ServicesAnnotated
)

// Bounds checked by Config.Validate.
const (
	// MinLease is the shortest finite lease: leases are renewed at half-life,
	// and a shorter lease would keep a router that serves one request at a
	// time busy with renewals.
	MinLease = time.Minute
	// MaxTimeout bounds discoveryTimeout and callTimeout: a router on the LAN
	// answers in milliseconds, and the service controller's workers wait for
	// every call.
	MaxTimeout = time.Minute
	// MinCallTimeout is the shortest callTimeout. miniupnpd answers a call
	// in 2-18 ms with one mapping; 100ms leaves room for a LAN round trip and
	// a busy router. Shorter, every call times out and no mapping is ever
	// made. (A table of tens of mappings needs more: 100-330 ms at 60, which
	// the default 2s covers.)
	MinCallTimeout = 100 * time.Millisecond
	// MinDiscoveryTimeout is the shortest discoveryTimeout. One discovery is
	// an SSDP answer (about 50 ms), igd's settle time (100 ms), a description
	// fetch and two calls to the router; shorter, the router is never found.
	MinDiscoveryTimeout = 500 * time.Millisecond
	// MinRenewInterval is the shortest renewInterval. Each background pass
	// reads the whole table from a router that serves one request at a time,
	// and the service controller's calls queue behind it.
	MinRenewInterval = 10 * time.Second
	// MaxLease is the longest lease: IGD:2 routers store no more than 7 days.
	MaxLease = igd.MaxLease
)

// renewPassCallTimeouts is how many callTimeouts a background pass must be
// able to wait, after a discoveryTimeout, before it is cut off at
// renewInterval: after a router reboot a pass finds the router again, lists
// the table (igd allows GetListOfPortMappings five callTimeouts) and renews
// at least one mapping. Shorter, a pass that meets a slow router is cut off
// before it renews anything, every time, and every lease expires.
const renewPassCallTimeouts = 6

// ErrInvalidConfig is matched (with errors.Is) by every error ParseConfig and
// Config.Validate return. Problems with keys are *field.Error values naming
// the key's path ("gateway.callTimeout", "instances.nodes[n1].zone"); the
// error wraps their utilerrors.Aggregate, which errors.As finds.
var ErrInvalidConfig = errors.New("invalid edge cloud-config")

// Config is the edge provider's cloud-config, the file given to the
// cloud-controller-manager with --cloud-config. It is one YAML document (JSON
// works too), read strictly: an unknown key, a duplicate key or a value of the
// wrong type is an error naming the key, and so is a second document. The
// file, and its document with YAML aliases expanded, may be at most 64 KiB.
// Every key is optional; an empty or missing file
// means all defaults. The zero Config is not the default: start from Default.
//
//	gateway:
//	  url: ""                 # router root-description URL; "" = SSDP discovery
//	  discoveryTimeout: 3s    # bound on finding the router
//	  callTimeout: 2s         # bound on each router call
//	loadBalancer:
//	  lease: 1h               # 0 = the default, 1h
//	  permanentLease: false   # permanent mappings (still renewed)
//	  services: annotated     # annotated | all
//	  renewInterval: 0s       # 0 = half the lease, at most 5m
//	  secureMode: false       # router maps only to the asking host
//	  allowNonPublicExternalIP: false # report a private or CGNAT external IP
//	  nodeName: ""            # node this CCM runs on; "" = $NODE_NAME
//	instances:
//	  zone: ""                # default zone label; "" = none
//	  region: ""              # default region label; "" = none
//	  instanceType: ""        # default instance-type label; "" = none
//	  nodes: {}               # per-node addresses and labels, by node name
//
// The file examples/edge-ccm/cloud-config.yaml documents each key at length.
type Config struct {
	// Gateway says how to reach the router.
	Gateway GatewayConfig `json:"gateway"`
	// LoadBalancer configures the Service load balancer.
	LoadBalancer LoadBalancerConfig `json:"loadBalancer"`
	// Instances configures node initialization (InstancesV2).
	Instances InstancesConfig `json:"instances"`
}

// GatewayConfig is the "gateway" section: how to find and talk to the
// router (a UPnP Internet Gateway Device).
type GatewayConfig struct {
	// URL is the router's root-description URL, for example
	// "http://192.168.1.1:5000/rootDesc.xml" (miniupnpd). Key "url", default
	// "": find the router by SSDP discovery on the local network. Set it when
	// the network filters multicast. It must be an absolute http or https URL.
	URL string `json:"url"`
	// DiscoveryTimeout bounds one attempt to find the router (SSDP search and
	// description fetch). Key "discoveryTimeout", default 3s, at least 500ms
	// and at most 1m.
	// Discovery happens on first use and again after the router stops
	// answering, never at start-up.
	DiscoveryTimeout Duration `json:"discoveryTimeout"`
	// CallTimeout bounds each call to the router. Key "callTimeout", default
	// 2s, at least 100ms and at most 1m.
	CallTimeout Duration `json:"callTimeout"`
}

// LoadBalancerConfig is the "loadBalancer" section: how Services of type
// LoadBalancer are mapped on the router.
type LoadBalancerConfig struct {
	// Lease is the lease of every port mapping, renewed at half-life while
	// the CCM runs, so mappings of a CCM that died expire on the router.
	// Key "lease", default 1h; 0 also means the default, as for
	// loadbalancer.Config.Lease (permanent mappings are permanentLease). A
	// lease is at least 1m and at most
	// 168h (7 days), in whole seconds.
	Lease Duration `json:"lease"`
	// PermanentLease asks the router for permanent mappings, still renewed
	// (IGD:2 routers cap every lease at 7 days): the ports stay open for a
	// week after the cluster is gone. Key "permanentLease", default false;
	// lease must then be unset.
	PermanentLease bool `json:"permanentLease"`
	// Services selects the Services served. Key "services", default
	// "annotated": only Services annotated ccmkit.io/load-balancer-type:
	// upnp-igd (or the original edge CCM's midokura.com/load-balancer-type:
	// upnp-igd); the others are left to another controller and get one
	// Normal event saying how to opt in. "all": every Service of type
	// LoadBalancer, so that any chart that creates one opens a port on the
	// internet.
	Services ServiceSelection `json:"services"`
	// RenewInterval is how often leases are renewed, the router's table
	// repaired (after a router reboot) and its external IP re-read. Key
	// "renewInterval", default 0: half the lease, at most 5m. When set it
	// must be at most half the lease (half of 168h for a permanent lease),
	// and at least 10s and discoveryTimeout + 6 × callTimeout (15s with the
	// default timeouts): each pass is cut off at the interval, and must be
	// able to find the router again, list its table and renew.
	RenewInterval Duration `json:"renewInterval"`
	// SecureMode says the router only lets a host map ports to itself
	// (miniupnpd's secure_mode=yes, the default of many routers): every
	// mapping then points at the node this CCM runs on (nodeName, or the
	// node whose address is this host's address toward the router). Key
	// "secureMode", default false: mappings may point at any ready node.
	SecureMode bool `json:"secureMode"`
	// AllowNonPublicExternalIP lets Services report a private or CGNAT
	// external IP (a router behind another NAT: reachable only from the
	// outer network). Key "allowNonPublicExternalIP", default false:
	// Services wait for a public address, with a Warning event.
	AllowNonPublicExternalIP bool `json:"allowNonPublicExternalIP"`
	// NodeName is the name of the node this CCM runs on. Key "nodeName",
	// default "": the NODE_NAME environment variable (set it from the
	// downward API, as the example manifests do). When both are empty and
	// secureMode is true, the CCM finds its node by matching its own
	// address toward the router against the nodes' addresses.
	NodeName string `json:"nodeName"`
}

// ServiceSelection is the value of loadBalancer.services.
type ServiceSelection string

// The values of loadBalancer.services.
const (
	// ServicesAnnotated, the default, serves only annotated Services.
	ServicesAnnotated ServiceSelection = "annotated"
	// ServicesAll serves every Service of type LoadBalancer.
	ServicesAll ServiceSelection = "all"
)

// InstancesConfig is the "instances" section: what node initialization
// writes on nodes. A node's ProviderID is edge://<node-name>, or the one
// kubelet was given with --provider-id=edge://... .
//
// For the zone, region and instance type of a node the first non-empty of
// these wins: the node's entry under nodes; the label the node already
// carries (topology.kubernetes.io/zone, topology.kubernetes.io/region,
// node.kubernetes.io/instance-type, for example from kubelet --node-labels);
// the section's default below. Empty everywhere means no label.
type InstancesConfig struct {
	// Zone is the default zone. Key "zone", default "" (none). It must be a
	// valid label value.
	Zone string `json:"zone"`
	// Region is the default region. Key "region", default "" (none). It must
	// be a valid label value.
	Region string `json:"region"`
	// InstanceType is the default instance type. Key "instanceType", default
	// "" (none). It must be a valid label value.
	InstanceType string `json:"instanceType"`
	// Nodes holds per-node settings keyed by node name. Key "nodes", default
	// empty.
	Nodes map[string]NodeConfig `json:"nodes"`
}

// NodeConfig is one entry of instances.nodes.
type NodeConfig struct {
	// Addresses replace the addresses the node reports itself. Key
	// "addresses", default empty: use the node's own status addresses (and
	// the IPs kubelet was given with --node-ip).
	Addresses []NodeAddress `json:"addresses"`
	// Zone of this node. Key "zone", default "": see InstancesConfig.
	Zone string `json:"zone"`
	// Region of this node. Key "region", default "": see InstancesConfig.
	Region string `json:"region"`
	// InstanceType of this node. Key "instanceType", default "": see
	// InstancesConfig.
	InstanceType string `json:"instanceType"`
}

// NodeAddress is one address of a node, as in a Node's status.
type NodeAddress struct {
	// Type is one of InternalIP, ExternalIP, Hostname, InternalDNS,
	// ExternalDNS. Key "type", required.
	Type string `json:"type"`
	// Address is an IP address for the IP types, a DNS name otherwise. Key
	// "address", required.
	Address string `json:"address"`
}

// Default returns the configuration an empty cloud-config means.
func Default() Config {
	return Config{
		Gateway: GatewayConfig{
			DiscoveryTimeout: Duration{DefaultDiscoveryTimeout},
			CallTimeout:      Duration{DefaultCallTimeout},
		},
		LoadBalancer: LoadBalancerConfig{
			Lease:    Duration{DefaultLease},
			Services: DefaultServices,
		},
	}
}

// ParseConfig reads a cloud-config. A nil reader or an empty document gives
// Default(). Keys that are absent or null keep their defaults. The result is
// validated; every error matches ErrInvalidConfig (see there).
func ParseConfig(r io.Reader) (Config, error) {
	cfg := Default()
	if r == nil {
		return cfg, nil
	}
	errs, err := decodeYAML(r, &cfg)
	if err != nil {
		return Config{}, err
	}
	if len(cfg.Instances.Nodes) == 0 {
		cfg.Instances.Nodes = nil // "nodes: {}" is the default, as Default() writes it
	}
	if len(errs) == 0 {
		errs = cfg.validate()
	}
	if len(errs) > 0 {
		return Config{}, invalid(errs)
	}
	return cfg, nil
}

// Validate checks every key of c and reports all problems (see
// ErrInvalidConfig).
func (c Config) Validate() error {
	if errs := c.validate(); len(errs) > 0 {
		return invalid(errs)
	}
	return nil
}

// maxReported bounds the problems an error lists, so that a file of many
// bad keys cannot make a long error.
const maxReported = 20

func invalid(errs field.ErrorList) error {
	if n := len(errs) - maxReported; n > 0 {
		return fmt.Errorf("%w: %w (and %d more)", ErrInvalidConfig, errs[:maxReported].ToAggregate(), n)
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, errs.ToAggregate())
}

func (c Config) validate() field.ErrorList {
	var errs field.ErrorList
	gateway, lb, instances := field.NewPath("gateway"), field.NewPath("loadBalancer"), field.NewPath("instances")
	add := func(path *field.Path, value string, detail string) {
		errs = append(errs, field.Invalid(path, clip(value), detail))
	}

	if u := c.Gateway.URL; u != "" {
		parsed, err := url.Parse(u)
		switch {
		case err != nil:
			add(gateway.Child("url"), u, "not a URL")
		case parsed.Scheme != "http" && parsed.Scheme != "https":
			add(gateway.Child("url"), u, "must be an http:// or https:// URL of the router's root description")
		case parsed.Host == "":
			add(gateway.Child("url"), u, "has no host")
		}
	}
	checkTimeout := func(path *field.Path, d Duration, floor time.Duration) {
		if d.Duration < floor || d.Duration > MaxTimeout {
			add(path, d.String(), fmt.Sprintf("must be at least %s and at most %s", floor, MaxTimeout))
		}
	}
	checkTimeout(gateway.Child("discoveryTimeout"), c.Gateway.DiscoveryTimeout, MinDiscoveryTimeout)
	checkTimeout(gateway.Child("callTimeout"), c.Gateway.CallTimeout, MinCallTimeout)

	if l := c.LoadBalancer.Lease.Duration; l != 0 {
		switch {
		case c.LoadBalancer.PermanentLease && l != DefaultLease:
			add(lb.Child("lease"), l.String(), "must be unset when loadBalancer.permanentLease is true")
		case l < MinLease || l > MaxLease:
			add(lb.Child("lease"), l.String(), fmt.Sprintf("must be 0 (the default, %s) or between %s and %s (routers cap leases at 7 days)", DefaultLease, MinLease, MaxLease))
		case l%time.Second != 0:
			add(lb.Child("lease"), l.String(), "must be whole seconds")
		}
	}
	if r := c.LoadBalancer.RenewInterval.Duration; r != 0 {
		limit := c.LoadBalancer.Lease.Duration / 2
		switch {
		case c.LoadBalancer.PermanentLease:
			limit = MaxLease / 2
		case limit == 0:
			limit = DefaultLease / 2
		}
		pass := c.Gateway.DiscoveryTimeout.Duration + renewPassCallTimeouts*c.Gateway.CallTimeout.Duration
		switch {
		case r < 0 || r > limit:
			add(lb.Child("renewInterval"), r.String(), fmt.Sprintf("must be 0 (automatic) or positive and at most half the lease (%s)", limit))
		case r < MinRenewInterval:
			add(lb.Child("renewInterval"), r.String(), fmt.Sprintf("must be 0 (automatic) or at least %s", MinRenewInterval))
		case r < pass:
			add(lb.Child("renewInterval"), r.String(), fmt.Sprintf("must be 0 (automatic) or at least %s (gateway.discoveryTimeout + %d × gateway.callTimeout), so that a background pass can find the router, list its table and renew before it is cut off", pass, renewPassCallTimeouts))
		}
	}
	switch c.LoadBalancer.Services {
	case ServicesAll, ServicesAnnotated:
	default:
		add(lb.Child("services"), string(c.LoadBalancer.Services), `must be "all" or "annotated"`)
	}
	if n := c.LoadBalancer.NodeName; n != "" {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			add(lb.Child("nodeName"), n, "not a node name: "+strings.Join(msgs, "; "))
		}
	}

	checkLabel := func(path *field.Path, v string) {
		if v == "" {
			return
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			add(path, v, "not a valid label value: "+strings.Join(msgs, "; "))
		}
	}
	checkLabel(instances.Child("zone"), c.Instances.Zone)
	checkLabel(instances.Child("region"), c.Instances.Region)
	checkLabel(instances.Child("instanceType"), c.Instances.InstanceType)
	for _, name := range slices.Sorted(maps.Keys(c.Instances.Nodes)) {
		node := c.Instances.Nodes[name]
		base := instances.Child("nodes").Key(clip(name))
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			add(base, name, "not a node name: "+strings.Join(msgs, "; "))
		}
		checkLabel(base.Child("zone"), node.Zone)
		checkLabel(base.Child("region"), node.Region)
		checkLabel(base.Child("instanceType"), node.InstanceType)
		for i, a := range node.Addresses {
			path := base.Child("addresses").Index(i)
			switch v1.NodeAddressType(a.Type) {
			case v1.NodeInternalIP, v1.NodeExternalIP:
				if _, err := netip.ParseAddr(a.Address); err != nil {
					add(path.Child("address"), a.Address, "must be an IP address for type "+a.Type)
				}
			case v1.NodeHostName, v1.NodeInternalDNS, v1.NodeExternalDNS:
				if msgs := validation.IsDNS1123Subdomain(a.Address); len(msgs) > 0 {
					add(path.Child("address"), a.Address, "must be a DNS name for type "+a.Type+": "+strings.Join(msgs, "; "))
				}
			default:
				add(path.Child("type"), a.Type, "must be one of InternalIP, ExternalIP, Hostname, InternalDNS, ExternalDNS")
			}
		}
	}
	return errs
}
