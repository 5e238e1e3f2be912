package edge

import (
	"cmp"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

// Bounds of the cloud-config's own; defaults and lease bounds are igd's and
// loadbalancer's.
const (
	MaxTimeout          = time.Minute // both timeouts
	MinCallTimeout      = 100 * time.Millisecond
	MinDiscoveryTimeout = 500 * time.Millisecond
	MinRenewInterval    = 10 * time.Second
)

// renewPassCallTimeouts is how many callTimeouts, after a discoveryTimeout, a
// background pass needs to find a rebooted router, list its table (five) and
// renew a mapping before renewInterval cuts it off.
const renewPassCallTimeouts = 6

// ErrInvalidConfig is matched (with errors.Is) by every error ParseConfig and
// Config.Validate return. Problems with keys are *field.Error values naming
// the key's path ("gateway.callTimeout", "instances.nodes[n1].zone"); the
// error wraps their utilerrors.Aggregate, which errors.As finds.
var ErrInvalidConfig = errors.New("invalid edge cloud-config")

// Config is the cloud-config (--cloud-config): one YAML or JSON document of at
// most 64 KiB, YAML aliases expanded, read strictly. Every key is optional:
// an empty file means Default() (the zero Config is not valid). Durations are
// Go duration strings ("90s", "1h30m"), or 0. The fields document their keys;
// examples/edge-ccm/cloud-config.yaml shows them all with their defaults.
type Config struct {
	Gateway      GatewayConfig      `json:"gateway"`
	LoadBalancer LoadBalancerConfig `json:"loadBalancer"`
	Instances    InstancesConfig    `json:"instances"`
}

// GatewayConfig is the "gateway" section: how to reach the router.
type GatewayConfig struct {
	// URL is the router's root description ("http://192.168.1.1:5000/rootDesc.xml";
	// `upnpc -l` prints it as "desc:"). "": SSDP discovery, which needs
	// hostNetwork and multicast. The router is found on first use and again
	// when it stops answering, never at start-up.
	URL string `json:"url"`
	// DiscoveryTimeout bounds one attempt to find the router: at least
	// MinDiscoveryTimeout, at most MaxTimeout; igd.DefaultDiscoveryTimeout.
	DiscoveryTimeout metav1.Duration `json:"discoveryTimeout"`
	// CallTimeout bounds each router call: at least MinCallTimeout, at most
	// MaxTimeout; igd.DefaultCallTimeout.
	CallTimeout metav1.Duration `json:"callTimeout"`
	// Protocol writes mappings through "upnp" (UPnP IGD), "pcp" (PCP, with
	// each mapping's nonce derived from pcpSecretFile, so that the router
	// refuses any other host's PCP delete; reads stay UPnP: for a router
	// serving both, such as miniupnpd with enable_natpmp=yes and
	// pcp_allow_thirdparty=yes; restarts are repaired on the router's
	// ANNOUNCE, with no idle probe) or "auto" (the default: "pcp" when
	// pcpSecretFile is set, writing through UPnP whenever the router does
	// not take a PCP request, and probing as "upnp" does; else "upnp").
	Protocol string `json:"protocol"`
	// PCPSecretFile is a file holding the cluster's PCP secret, at least
	// 32 bytes, the same for every replica (a mounted Kubernetes Secret).
	// Required with protocol "pcp". A new secret leaves the mappings made
	// under the old one to expire with their lease before they are mapped
	// again.
	PCPSecretFile string `json:"pcpSecretFile"`
}

// Values of gateway.protocol.
const (
	ProtocolAuto = "auto"
	ProtocolUPnP = "upnp"
	ProtocolPCP  = "pcp"
)

// LoadBalancerConfig is the "loadBalancer" section: how Services are mapped
// (the keys are loadbalancer.Config's).
type LoadBalancerConfig struct {
	// Lease of every mapping, renewed while the CCM runs so that a dead CCM's
	// mappings expire. 0 means loadbalancer.DefaultLease (the default); else
	// whole seconds from loadbalancer.MinLease to igd.MaxLease.
	Lease metav1.Duration `json:"lease"`
	// PermanentLease asks for permanent mappings (still renewed; IGD:2
	// routers cap them at igd.MaxLease), open a week after the CCM is gone.
	// Lease must then be unset.
	PermanentLease bool `json:"permanentLease"`
	// Services is "annotated" (the default: only Services annotated
	// ccmkit.io/load-balancer-type: upnp-igd; the others get an OptInRequired
	// event) or "all" (any Service of type LoadBalancer opens a port).
	Services loadbalancer.ServiceSelection `json:"services"`
	// RenewInterval is how often leases are renewed, the table repaired and
	// the external IP re-read. 0: half the lease, at most
	// loadbalancer.DefaultMaxRenewInterval. Else at most half the lease, at
	// least MinRenewInterval and discoveryTimeout + 6 × callTimeout.
	RenewInterval metav1.Duration `json:"renewInterval"`
	// SecureMode: the router maps ports only to the asking host (miniupnpd's
	// secure_mode=yes), so every mapping targets this CCM's node (NodeName).
	SecureMode bool `json:"secureMode"`
	// AllowNonPublicExternalIP reports a private or CGNAT external IP (a
	// router behind NAT); false: Services wait for a public one.
	AllowNonPublicExternalIP bool `json:"allowNonPublicExternalIP"`
	// NodeName is the node this CCM runs on. "": $NODE_NAME, else the node
	// whose address is this host's address toward the router.
	NodeName string `json:"nodeName"`
}

// InstancesConfig is the "instances" section: what node initialization
// writes. Every node gets ProviderID edge://<node-name> (one that carries
// k3s:// or rke2://<node-name> keeps it). A node's zone, region and instance
// type come from its entry in Nodes, else its own labels, else these
// defaults; "" everywhere: no label. Values must be label values.
type InstancesConfig struct {
	Zone         string                `json:"zone"`
	Region       string                `json:"region"`
	InstanceType string                `json:"instanceType"`
	Nodes        map[string]NodeConfig `json:"nodes"` // by node name
}

// NodeConfig is one entry of instances.nodes. Addresses, when set, replace
// the node's own (and the IPs kubelet was given with --node-ip).
type NodeConfig struct {
	Addresses    []NodeAddress `json:"addresses"`
	Zone         string        `json:"zone"`
	Region       string        `json:"region"`
	InstanceType string        `json:"instanceType"`
}

// NodeAddress is one address of a node, as in a Node's status: Type is one
// of InternalIP, ExternalIP (Address an IP), Hostname, InternalDNS or
// ExternalDNS (Address a DNS name).
type NodeAddress struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

// Default returns the configuration an empty cloud-config means.
func Default() Config {
	return Config{
		Gateway:      GatewayConfig{Protocol: ProtocolAuto, DiscoveryTimeout: metav1.Duration{Duration: igd.DefaultDiscoveryTimeout}, CallTimeout: metav1.Duration{Duration: igd.DefaultCallTimeout}},
		LoadBalancer: LoadBalancerConfig{Lease: metav1.Duration{Duration: loadbalancer.DefaultLease}},
	}
}

// ParseConfig reads a cloud-config. A nil reader or an empty document gives
// Default(). Keys that are absent or null keep their defaults. The result is
// validated; every error matches ErrInvalidConfig (see there). A key of the
// wrong type or unknown stops it before validation; a value of the right type
// that is not accepted (loadBalancer.services) is reported after the others.
func ParseConfig(r io.Reader) (Config, error) {
	cfg := Default()
	if r == nil {
		return cfg, nil
	}
	errs, err := decodeYAML(r, &cfg)
	if err != nil || slices.ContainsFunc(errs, func(e *field.Error) bool { return e.Type != field.ErrorTypeInvalid }) {
		return Config{}, cmp.Or(err, invalid(errs))
	}
	if len(cfg.Instances.Nodes) == 0 {
		cfg.Instances.Nodes = nil // "nodes: {}" is the default, as Default() writes it
	}
	if err := invalid(append(cfg.validate(), errs...)); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate checks every key of c and reports all problems (see
// ErrInvalidConfig).
func (c Config) Validate() error {
	return invalid(c.validate())
}

// maxReported bounds the problems an error lists.
const maxReported = 20

// invalid returns nil for no errs, else an ErrInvalidConfig naming the first
// maxReported.
func invalid(errs field.ErrorList) error {
	if len(errs) > maxReported {
		return fmt.Errorf("%w: %w (and %d more)", ErrInvalidConfig, errs[:maxReported].ToAggregate(), len(errs)-maxReported)
	} else if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errs.ToAggregate())
	}
	return nil
}

func (c Config) validate() field.ErrorList {
	var errs field.ErrorList
	gw, lb, inst := field.NewPath("gateway"), field.NewPath("loadBalancer"), field.NewPath("instances")
	bad := func(path *field.Path, value, detail string) {
		errs = append(errs, field.Invalid(path, clip(value), detail))
	}
	name := func(path *field.Path, v, what string, check func(string) []string) {
		if msgs := check(v); len(msgs) > 0 {
			bad(path, v, what+strings.Join(msgs, "; "))
		}
	}
	label := func(path *field.Path, v string) {
		if v != "" {
			name(path, v, "not a valid label value: ", validation.IsValidLabelValue)
		}
	}
	timeout := func(key string, d metav1.Duration, floor time.Duration) {
		if d.Duration < floor || d.Duration > MaxTimeout {
			bad(gw.Child(key), d.Duration.String(), fmt.Sprintf("must be at least %s and at most %s", floor, MaxTimeout))
		}
	}

	if u, err := url.Parse(c.Gateway.URL); c.Gateway.URL != "" {
		switch {
		case err != nil:
			bad(gw.Child("url"), c.Gateway.URL, "not a URL")
		case u.Scheme != "http" && u.Scheme != "https":
			bad(gw.Child("url"), c.Gateway.URL, "must be an http:// or https:// URL of the router's root description")
		case u.Host == "":
			bad(gw.Child("url"), c.Gateway.URL, "has no host")
		}
	}
	switch c.Gateway.Protocol {
	case "", ProtocolAuto, ProtocolUPnP:
	case ProtocolPCP:
		if c.Gateway.PCPSecretFile == "" {
			bad(gw.Child("pcpSecretFile"), "", `must be set with gateway.protocol "pcp"`)
		}
		if c.LoadBalancer.PermanentLease {
			bad(lb.Child("permanentLease"), "true", `must be false with gateway.protocol "pcp": PCP mappings always have a lifetime`)
		}
	default:
		bad(gw.Child("protocol"), c.Gateway.Protocol, `must be "auto", "upnp" or "pcp"`)
	}
	timeout("discoveryTimeout", c.Gateway.DiscoveryTimeout, MinDiscoveryTimeout)
	timeout("callTimeout", c.Gateway.CallTimeout, MinCallTimeout)

	lease, renew := c.LoadBalancer.Lease.Duration, c.LoadBalancer.RenewInterval.Duration
	switch {
	case lease == 0:
	case c.LoadBalancer.PermanentLease && lease != loadbalancer.DefaultLease:
		bad(lb.Child("lease"), lease.String(), "must be unset when loadBalancer.permanentLease is true")
	case lease < loadbalancer.MinLease || lease > igd.MaxLease:
		bad(lb.Child("lease"), lease.String(), fmt.Sprintf("must be 0 (the default, %s) or between %s and %s (routers cap leases at 7 days)", loadbalancer.DefaultLease, loadbalancer.MinLease, igd.MaxLease))
	case lease%time.Second != 0:
		bad(lb.Child("lease"), lease.String(), "must be whole seconds")
	}
	limit := cmp.Or(lease, loadbalancer.DefaultLease) / 2
	if c.LoadBalancer.PermanentLease {
		limit = igd.MaxLease / 2
	}
	pass := c.Gateway.DiscoveryTimeout.Duration + renewPassCallTimeouts*c.Gateway.CallTimeout.Duration
	switch {
	case renew == 0:
	case renew < 0 || renew > limit:
		bad(lb.Child("renewInterval"), renew.String(), fmt.Sprintf("must be 0 (automatic) or positive and at most half the lease (%s)", limit))
	case renew < MinRenewInterval:
		bad(lb.Child("renewInterval"), renew.String(), fmt.Sprintf("must be 0 (automatic) or at least %s", MinRenewInterval))
	case renew < pass:
		bad(lb.Child("renewInterval"), renew.String(), fmt.Sprintf("must be 0 (automatic) or at least %s (gateway.discoveryTimeout + %d × gateway.callTimeout), so that a background pass can find the router, list its table and renew before it is cut off", pass, renewPassCallTimeouts))
	}
	services := c.LoadBalancer.Services.String() // valid if it reads back; the error names the values
	if err := new(loadbalancer.ServiceSelection).UnmarshalText([]byte(services)); err != nil {
		bad(lb.Child("services"), services, err.Error())
	}
	if n := c.LoadBalancer.NodeName; n != "" {
		name(lb.Child("nodeName"), n, "not a node name: ", validation.IsDNS1123Subdomain)
	}

	label(inst.Child("zone"), c.Instances.Zone)
	label(inst.Child("region"), c.Instances.Region)
	label(inst.Child("instanceType"), c.Instances.InstanceType)
	for _, n := range slices.Sorted(maps.Keys(c.Instances.Nodes)) {
		node, base := c.Instances.Nodes[n], inst.Child("nodes").Key(clip(n))
		name(base, n, "not a node name: ", validation.IsDNS1123Subdomain)
		label(base.Child("zone"), node.Zone)
		label(base.Child("region"), node.Region)
		label(base.Child("instanceType"), node.InstanceType)
		for i, a := range node.Addresses {
			path := base.Child("addresses").Index(i)
			switch v1.NodeAddressType(a.Type) {
			case v1.NodeInternalIP, v1.NodeExternalIP:
				if _, err := netip.ParseAddr(a.Address); err != nil {
					bad(path.Child("address"), a.Address, "must be an IP address for type "+a.Type)
				}
			case v1.NodeHostName, v1.NodeInternalDNS, v1.NodeExternalDNS:
				name(path.Child("address"), a.Address, "must be a DNS name for type "+a.Type+": ", validation.IsDNS1123Subdomain)
			default:
				bad(path.Child("type"), a.Type, "must be one of InternalIP, ExternalIP, Hostname, InternalDNS, ExternalDNS")
			}
		}
	}
	return errs
}
