package edge

import (
	"bytes"
	"cmp"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	yamlv3 "go.yaml.in/yaml/v3"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

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

const (
	// renewPassCallTimeouts is how many callTimeouts, after a discoveryTimeout, a background
	// pass needs to find a rebooted router, list its table (five) and renew a mapping.
	renewPassCallTimeouts = 6
	// maxInterfaceName is Linux's longest interface name (IFNAMSIZ - 1).
	maxInterfaceName = 15
	// maxConfigSize bounds a cloud-config, as read and with YAML aliases expanded: decoding
	// costs up to ~360 times the size (23 MiB for 64 KiB of one-character list items).
	maxConfigSize = 64 << 10
	// maxQuoted bounds what an error quotes of a value, a key or a YAML message;
	// maxReported, the problems it lists.
	maxQuoted, maxReported = 100, 20
)

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
	// `upnpc -l` prints it as "desc:"). "": SSDP discovery of the node's
	// default gateway (no other LAN host that answers is used), which needs
	// hostNetwork and multicast; set URL to use another router. The router is
	// found on first use and again
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
	// not take a PCP request, and probing as "upnp" does; else "upnp"), or
	// "pcp-only" (as "pcp", never reading the router: for a router that
	// speaks PCP and not UPnP; the PCP server is gateway.url's host, else
	// the default gateway).
	Protocol string `json:"protocol"`
	// PCPSecretFile is a file holding the cluster's PCP secret, at least
	// 32 bytes and random (New refuses one that could be guessed; make it
	// with `head -c 32 /dev/urandom | base64`), the same for every replica
	// (a mounted Kubernetes Secret). Surrounding white space is ignored.
	// Required with protocol "pcp" and "pcp-only". A new secret leaves the mappings made
	// under the old one to expire with their lease before they are mapped
	// again.
	PCPSecretFile string `json:"pcpSecretFile"`
	// IPv6 is the "gateway.ipv6" section: IPv6 firewall pinholes, off
	// unless enabled.
	IPv6 IPv6Config `json:"ipv6"`
}

// IPv6Config is the "gateway.ipv6" section: whether and how Services whose
// spec.ipFamilies include IPv6 are served, by opening the router's IPv6
// firewall (a pinhole per port, no NAT) to a node's global address, which is
// then the Service's IPv6 ingress. gateway.protocol chooses the protocol as
// it does for IPv4: UPnP (WANIPv6FirewallControl:1) for "upnp", and for
// "auto" without pcpSecretFile; PCP (a MAP for an IPv6 address, under a
// nonce from pcpSecretFile) for "pcp", "pcp-only", and "auto" with
// pcpSecretFile. Through UPnP, pinholes go only to the node this CCM runs
// on (loadBalancer.nodeName), to ports from 1024 (miniupnpd refuses other
// hosts and lower ports), and requests are sent from that node's global
// address as its Node status reports it; through PCP, to any eligible
// node's global address, any port (the router must allow THIRD_PARTY).
type IPv6Config struct {
	// Enabled serves the IPv6 family. false (the default): IPv6-only
	// Services are refused and dual-stack ones are served on IPv4 only,
	// with an IPFamilyNotServed event, as before. Off by default because a
	// pinhole exposes the node itself to the internet at the Service's
	// port, with no NAT in between: a Service that is dual-stack today
	// must not become reachable over IPv6 on an upgrade without the
	// operator deciding it.
	Enabled bool `json:"enabled"`
	// URL is where the router's IPv6 firewall is, on its IPv6 LAN
	// address (an IPv6 literal; a link-local one with its zone as
	// "[fe80::1%25eth0]"). Through UPnP, the root description
	// ("http://[2001:db8:1::1]:5000/rootDesc.xml"); "": SSDP over IPv6
	// (ff02::c) finds it. Through PCP, its host is the PCP server (on
	// port 5351); "": this host's IPv6 default router.
	URL string `json:"url"`
	// Interface is the LAN interface SSDP over IPv6 searches on ("eth0");
	// "": the one the kernel routes ff02::c through. UPnP only.
	Interface string `json:"interface"`
}

// Values of gateway.protocol.
const (
	ProtocolAuto = "auto"
	ProtocolUPnP = "upnp"
	ProtocolPCP  = "pcp"
	// ProtocolPCPOnly writes through PCP and never reads the router.
	ProtocolPCPOnly = "pcp-only"
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
	// whose address is this host's address toward the router; with UPnP
	// pinholes (gateway.ipv6) and no secureMode, first the node whose
	// address is the IPv4 address on the interface holding this host's
	// global IPv6 address (gateway.ipv6.interface when set), which works
	// where the IPv4 router is not found. With UPnP pinholes, when no node
	// reports that IPv4 address: the node reporting one of this host's
	// global IPv6 addresses (Nodes listing only their IPv6 address).
	NodeName string `json:"nodeName"`

	// The operator's limits. Each refused port is not mapped (a mapping the
	// Service held there is removed): its status says
	// ccmkit.io/NotAdmitted, and the Service's event (PortNotForwarded, or
	// SyncLoadBalancerFailed when no port is left) names the key.

	// AllowedNamespaces, when not empty, are the only namespaces whose
	// Services are mapped.
	AllowedNamespaces []string `json:"allowedNamespaces"`
	// AllowedExternalPorts, when not empty, are the only external ports
	// mapped: each a port ("443") or a range ("1024-65535").
	AllowedExternalPorts []string `json:"allowedExternalPorts"`
	// MaxMappings, when positive, caps the cluster's mappings (a consumer
	// router holds 32 to 256): past it a new mapping waits until another
	// Service gives one up. 0: no cap.
	MaxMappings int `json:"maxMappings"`
	// MaxMappingsPerService, when positive, caps each Service's mappings:
	// its ports past the first ones, by protocol and port, are refused.
	// 0: no cap.
	MaxMappingsPerService int `json:"maxMappingsPerService"`
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
	data, err := io.ReadAll(io.LimitReader(r, maxConfigSize+1))
	if err != nil {
		return Config{}, fmt.Errorf("%w: read: %w", ErrInvalidConfig, err)
	} else if len(data) > maxConfigSize {
		return Config{}, fmt.Errorf("%w: larger than %d bytes", ErrInvalidConfig, maxConfigSize)
	}
	// yaml.v3 nodes keep each alias a pointer, so aliases are bounded before
	// anything expands them (go-yaml bounds only the share of nodes that come
	// from aliases, which a 10 KB file of long strings passes while expanding
	// to 10 MB), and a second document, which YAMLToJSONStrict would ignore,
	// is refused (an empty one, as after a trailing "---", is harmless).
	dec, size := yamlv3.NewDecoder(bytes.NewReader(data)), 0
	for n := 1; ; n++ {
		var doc yamlv3.Node
		if err = dec.Decode(&doc); err != nil {
			break
		} else if err := expand(&doc, &size, map[*yamlv3.Node]bool{}); err != nil || size > maxConfigSize {
			return Config{}, cmp.Or(err, fmt.Errorf("%w: YAML aliases expand the document past %d bytes", ErrInvalidConfig, maxConfigSize))
		} else if c := doc.Content; n > 1 && len(c) > 0 && c[0].ShortTag() != "!!null" {
			return Config{}, invalid(field.ErrorList{field.Forbidden(field.NewPath("(document)"), fmt.Sprintf("YAML document %d (after a \"---\" line) would be ignored: a cloud-config is one document", n))})
		}
	}
	var doc []byte
	if errors.Is(err, io.EOF) {
		doc, err = yaml.YAMLToJSONStrict(data) // refusing duplicate keys
	}
	if err != nil {
		return Config{}, fmt.Errorf("%w: not valid YAML: %s", ErrInvalidConfig, clip(err.Error()))
	}
	errs := decodeStrict(nil, doc, reflect.ValueOf(&cfg).Elem())
	if slices.ContainsFunc(errs, func(e *field.Error) bool { return e.Type != field.ErrorTypeInvalid }) {
		return Config{}, invalid(errs)
	} else if err := invalid(append(cfg.validate(), errs...)); err != nil {
		return Config{}, err
	}
	if len(cfg.Instances.Nodes) == 0 {
		cfg.Instances.Nodes = nil // "nodes: {}" is the default, as Default() writes it
	}
	if len(cfg.LoadBalancer.AllowedNamespaces) == 0 {
		cfg.LoadBalancer.AllowedNamespaces = nil // "[]" too
	}
	if len(cfg.LoadBalancer.AllowedExternalPorts) == 0 {
		cfg.LoadBalancer.AllowedExternalPorts = nil
	}
	return cfg, nil
}

// Validate checks every key of c and reports all problems (ErrInvalidConfig).
func (c Config) Validate() error {
	return invalid(c.validate())
}

// invalid wraps the first maxReported errs in an ErrInvalidConfig; none: nil.
func invalid(errs field.ErrorList) error {
	if len(errs) > maxReported {
		return fmt.Errorf("%w: %w (and %d more)", ErrInvalidConfig, errs[:maxReported].ToAggregate(), len(errs)-maxReported)
	} else if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errs.ToAggregate())
	}
	return nil
}

func clip(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	return strings.ToValidUTF8(s[:maxQuoted], "") + "..."
}

func (c Config) validate() (errs field.ErrorList) {
	gw, lb, inst := field.NewPath("gateway"), field.NewPath("loadBalancer"), field.NewPath("instances")
	// add reports the first of a key's problems ("": none).
	add := func(path *field.Path, value string, details ...string) {
		if detail := cmp.Or(details...); detail != "" {
			errs = append(errs, field.Invalid(path, clip(value), detail))
		}
	}
	when := func(bad bool, detail string) string { return map[bool]string{true: detail}[bad] }
	problems := func(what string, msgs []string) string { return when(len(msgs) > 0, what+strings.Join(msgs, "; ")) }
	labels := func(path *field.Path, values ...string) {
		for i, key := range []string{"zone", "region", "instanceType"} {
			add(path.Child(key), values[i], when(values[i] != "", problems("not a valid label value: ", validation.IsValidLabelValue(values[i]))))
		}
	}
	g, l := c.Gateway, c.LoadBalancer
	u, err := url.Parse(g.URL)
	u = cmp.Or(u, new(url.URL))
	add(gw.Child("url"), g.URL, when(g.URL != "" && err != nil, "not a URL"),
		when(g.URL != "" && u.Scheme != "http" && u.Scheme != "https", "must be an http:// or https:// URL of the router's root description"),
		when(g.URL != "" && u.Host == "", "has no host"))
	v6 := gw.Child("ipv6")
	u6, err := url.Parse(g.IPv6.URL)
	u6 = cmp.Or(u6, new(url.URL))
	a6, errAddr := netip.ParseAddr(u6.Hostname())
	add(v6.Child("url"), g.IPv6.URL, when(g.IPv6.URL != "" && err != nil, "not a URL"),
		when(g.IPv6.URL != "" && u6.Scheme != "http", "must be an http:// URL of the router's root description on its IPv6 address"),
		when(g.IPv6.URL != "" && (errAddr != nil || !a6.Is6() || a6.Is4In6()), "its host must be an IPv6 address in brackets, such as http://[2001:db8:1::1]:5000/rootDesc.xml: the router takes pinhole requests over IPv6 only"))
	add(v6.Child("interface"), g.IPv6.Interface, when(len(g.IPv6.Interface) > maxInterfaceName || strings.ContainsAny(g.IPv6.Interface, "/% \t\n"),
		fmt.Sprintf("must be a network interface name (at most %d characters, no \"/\", \"%%\" or white space)", maxInterfaceName)))
	pcp := g.Protocol == ProtocolPCP || g.Protocol == ProtocolPCPOnly
	add(gw.Child("pcpSecretFile"), "", when(pcp && g.PCPSecretFile == "", fmt.Sprintf("must be set with gateway.protocol %q", g.Protocol)))
	add(lb.Child("permanentLease"), "true", when(pcp && l.PermanentLease, fmt.Sprintf("must be false with gateway.protocol %q: PCP mappings always have a lifetime", g.Protocol)))
	add(gw.Child("protocol"), g.Protocol, when(!slices.Contains([]string{"", ProtocolAuto, ProtocolUPnP, ProtocolPCP, ProtocolPCPOnly}, g.Protocol), `must be "auto", "upnp", "pcp" or "pcp-only"`))
	timeout := func(key string, d, floor time.Duration) {
		add(gw.Child(key), d.String(), when(d < floor || d > MaxTimeout, fmt.Sprintf("must be at least %s and at most %s", floor, MaxTimeout)))
	}
	timeout("discoveryTimeout", g.DiscoveryTimeout.Duration, MinDiscoveryTimeout)
	timeout("callTimeout", g.CallTimeout.Duration, MinCallTimeout)
	lease, renew := l.Lease.Duration, l.RenewInterval.Duration
	add(lb.Child("lease"), lease.String(), when(lease != 0 && l.PermanentLease && lease != loadbalancer.DefaultLease, "must be unset when loadBalancer.permanentLease is true"),
		when(lease != 0 && (lease < loadbalancer.MinLease || lease > igd.MaxLease), fmt.Sprintf("must be 0 (the default, %s) or between %s and %s (routers cap leases at 7 days)", loadbalancer.DefaultLease, loadbalancer.MinLease, igd.MaxLease)),
		when(lease%time.Second != 0, "must be whole seconds"))
	limit := cmp.Or(lease, loadbalancer.DefaultLease) / 2
	if l.PermanentLease {
		limit = igd.MaxLease / 2
	}
	if g.IPv6.Enabled {
		limit = min(limit, loadbalancer.MaxPinholeLease/2) // pinholes' leases end sooner
	}
	pass := g.DiscoveryTimeout.Duration + renewPassCallTimeouts*g.CallTimeout.Duration
	add(lb.Child("renewInterval"), renew.String(), when(renew != 0 && (renew < 0 || renew > limit), fmt.Sprintf("must be 0 (automatic) or positive and at most half the lease (%s)", limit)),
		when(renew != 0 && renew < MinRenewInterval, fmt.Sprintf("must be 0 (automatic) or at least %s", MinRenewInterval)),
		when(renew != 0 && renew < pass, fmt.Sprintf("must be 0 (automatic) or at least %s (gateway.discoveryTimeout + %d × gateway.callTimeout), so that a background pass can find the router, list its table and renew before it is cut off", pass, renewPassCallTimeouts)))
	services := l.Services.String() // valid if it reads back; the error names the values
	err = new(loadbalancer.ServiceSelection).UnmarshalText([]byte(services))
	add(lb.Child("services"), services, when(err != nil, fmt.Sprint(err)))
	add(lb.Child("nodeName"), l.NodeName, when(l.NodeName != "", problems("not a node name: ", validation.IsDNS1123Subdomain(l.NodeName))))
	for i, ns := range l.AllowedNamespaces {
		add(lb.Child("allowedNamespaces").Index(i), ns, problems("not a namespace name: ", validation.IsDNS1123Label(ns)))
	}
	for i, r := range l.AllowedExternalPorts {
		_, _, ok := portRange(r)
		add(lb.Child("allowedExternalPorts").Index(i), r, when(!ok, `must be a port ("443") or a range of ports ("1024-65535"), from 1 to 65535`))
	}
	add(lb.Child("maxMappings"), strconv.Itoa(l.MaxMappings), when(l.MaxMappings < 0, "must be 0 (no cap) or positive"))
	add(lb.Child("maxMappingsPerService"), strconv.Itoa(l.MaxMappingsPerService), when(l.MaxMappingsPerService < 0, "must be 0 (no cap) or positive"))
	labels(inst, c.Instances.Zone, c.Instances.Region, c.Instances.InstanceType)
	for _, n := range slices.Sorted(maps.Keys(c.Instances.Nodes)) {
		node, base := c.Instances.Nodes[n], inst.Child("nodes").Key(clip(n))
		add(base, n, problems("not a node name: ", validation.IsDNS1123Subdomain(n)))
		labels(base, node.Zone, node.Region, node.InstanceType)
		for i, a := range node.Addresses {
			path, t := base.Child("addresses").Index(i), v1.NodeAddressType(a.Type)
			ip, dns := t == v1.NodeInternalIP || t == v1.NodeExternalIP, t == v1.NodeHostName || t == v1.NodeInternalDNS || t == v1.NodeExternalDNS
			_, err := netip.ParseAddr(a.Address)
			add(path.Child("address"), a.Address, when(ip && err != nil, "must be an IP address for type "+a.Type), when(dns, problems("must be a DNS name for type "+a.Type+": ", validation.IsDNS1123Subdomain(a.Address))))
			add(path.Child("type"), a.Type, when(!ip && !dns, "must be one of InternalIP, ExternalIP, Hostname, InternalDNS, ExternalDNS"))
		}
	}
	return errs
}

// expand adds to size n's size with its aliases expanded (the bytes of each
// scalar, plus one per node), stopping past maxConfigSize; open holds the
// nodes being counted.
func expand(n *yamlv3.Node, size *int, open map[*yamlv3.Node]bool) error {
	if n.Kind == yamlv3.AliasNode {
		n = n.Alias
	}
	if open[n] {
		return fmt.Errorf("%w: YAML alias at line %d is inside its own anchor's value", ErrInvalidConfig, n.Line)
	}
	open[n], *size = true, *size+len(n.Value)+1
	defer delete(open, n)
	for _, c := range n.Content {
		if err := expand(c, size, open); err != nil || *size > maxConfigSize {
			return err
		}
	}
	return nil
}

var durationType, textType = reflect.TypeFor[metav1.Duration](), reflect.TypeFor[encoding.TextUnmarshaler]()

// decodeStrict decodes the JSON data into out with kjson.UnmarshalStrict
// (case-sensitive keys, unknown keys refused). When that fails it descends
// into data, decoding each key, list item or map entry on its own, so that
// every problem is reported with its full path: kjson reports only the first
// value of the wrong type, without map keys or list indexes.
func decodeStrict(path *field.Path, data []byte, out reflect.Value) (errs field.ErrorList) {
	strict, err := kjson.UnmarshalStrict(data, out.Addr().Interface())
	if err == nil && len(strict) == 0 {
		return nil
	}
	var obj map[string]json.RawMessage
	var list []json.RawMessage
	switch t := out.Type(); {
	case t == durationType && string(data) == "0": // metav1.Duration reads only strings
		out.SetZero()
		fallthrough
	case t == durationType && string(data) == "null":
		return nil
	case t.Kind() == reflect.Struct && kjson.UnmarshalCaseSensitivePreserveInts(data, &obj) == nil && obj != nil:
		fields := map[string]int{}
		for i := range t.NumField() {
			fields[t.Field(i).Tag.Get("json")] = i
		}
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			if i, known := fields[key]; known {
				errs = append(errs, decodeStrict(path.Child(key), obj[key], out.Field(i))...)
			} else {
				errs = append(errs, field.Forbidden(path.Child(clip(key)), "unknown field (known: "+strings.Join(slices.Sorted(maps.Keys(fields)), ", ")+")"))
			}
		}
		return errs
	case t.Kind() == reflect.Map && kjson.UnmarshalCaseSensitivePreserveInts(data, &obj) == nil && obj != nil: // UnmarshalStrict made the map
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			elem := reflect.New(t.Elem()).Elem()
			errs = append(errs, decodeStrict(path.Key(clip(key)), obj[key], elem)...)
			out.SetMapIndex(reflect.ValueOf(key), elem)
		}
		return errs
	case t.Kind() == reflect.Slice && kjson.UnmarshalCaseSensitivePreserveInts(data, &list) == nil && list != nil:
		out.Set(reflect.MakeSlice(t, len(list), len(list)))
		for i, item := range list {
			errs = append(errs, decodeStrict(path.Index(i), item, out.Index(i))...)
		}
		return errs
	case reflect.PointerTo(t).Implements(textType) && data[0] == '"':
		var s string
		_ = json.Unmarshal(data, &s)
		return field.ErrorList{field.Invalid(path, clip(s), err.Error())} // it names the values accepted
	}
	var value any = json.RawMessage(data)
	if len(data) > maxQuoted {
		value = clip(string(data))
	}
	return field.ErrorList{field.TypeInvalid(cmp.Or(path, field.NewPath("(document)")), value, reason(out.Type(), data))}
}

// reason says what a value of type t should have been, given JSON data.
func reason(t reflect.Type, data []byte) string {
	got := cmp.Or(map[byte]string{'{': "a mapping", '[': "a list", '"': "a string", 't': "a boolean", 'f': "a boolean", 'n': "null"}[data[0]], "a number")
	if t == durationType {
		return cmp.Or(map[string]string{"a number": "a number has no unit: write a Go duration such as \"90s\" or \"1h\"", "a string": "not a Go duration such as \"2s\" or \"1h\""}[got], "must be a Go duration string such as \"2s\", not "+got)
	}
	want := map[reflect.Kind]string{reflect.Struct: "a mapping of fields", reflect.Map: "a mapping", reflect.Slice: "a list", reflect.String: "a string", reflect.Bool: "true or false", reflect.Int: "a whole number"}[t.Kind()]
	if reflect.PointerTo(t).Implements(textType) {
		want = "a string"
	}
	return "must be " + cmp.Or(want, t.String()) + ", not " + got
}
