package edge

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/internal/hostinfo"
	"github.com/ccmkit/ccmkit/loadbalancer"
	"github.com/ccmkit/ccmkit/provider"
)

// ProviderName is the name the edge provider is registered under, the value
// of --cloud-provider, and the scheme of every node's ProviderID
// ("edge://<node-name>").
const ProviderName = "edge"

// The load balancer's background work (lease renewal, repair) only runs if
// the composed provider can start it.
var (
	_ provider.Initializer = (*loadbalancer.LoadBalancer)(nil)
	_ provider.Runner      = (*loadbalancer.LoadBalancer)(nil)
)

// EnvNodeName is the environment variable Factory reads the name of the
// node the cloud-controller-manager runs on from, when the cloud-config has
// no loadBalancer.nodeName. The example manifests set it from the downward
// API (spec.nodeName).
const EnvNodeName = "NODE_NAME"

// Factory is the cloudprovider.Factory of the edge provider, to register
// under ProviderName (registry.MustRegister(edge.ProviderName,
// edge.Factory)). It reads the
// cloud-config from config (nil = no file: all defaults; see ParseConfig),
// takes the node name from $NODE_NAME when the config has none, and builds
// the provider with New. It does no network I/O. It registers igd's and
// loadbalancer's metrics in the legacy registry, served on the
// cloud-controller-manager's /metrics (New does not).
func Factory(config io.Reader) (cloudprovider.Interface, error) {
	return factory(os.Getenv)(config)
}

// factory is Factory with the environment replaceable by tests.
func factory(getenv func(string) string) cloudprovider.Factory {
	return func(config io.Reader) (cloudprovider.Interface, error) {
		igd.RegisterMetrics()
		loadbalancer.RegisterMetrics()
		cfg, err := configFrom(config, getenv)
		if err != nil {
			return nil, err
		}
		cloud, err := New(cfg, Options{})
		if err != nil {
			return nil, err // not a typed nil *provider.Cloud
		}
		return cloud, nil
	}
}

// configFrom parses the cloud-config and fills the node name from the
// environment when the config has none.
func configFrom(config io.Reader, getenv func(string) string) (Config, error) {
	cfg, err := ParseConfig(config)
	if err != nil {
		return Config{}, err
	}
	if cfg.LoadBalancer.NodeName == "" {
		cfg.LoadBalancer.NodeName = getenv(EnvNodeName)
	}
	return cfg, nil
}

// Options are what New takes besides the cloud-config, for embedders and
// tests. The zero value is what Factory uses.
type Options struct {
	// Client talks to the router. Nil means an igd.UPnPClient configured
	// from cfg.Gateway (which finds the router lazily, on first use), in
	// a pcp.Backend when gateway.protocol writes through PCP.
	Client igd.Client
	// Class, when not "", serves the Services of that loadBalancerClass
	// for a class controller (provider/lbclass), and classless ones only
	// with Classless: see loadbalancer.Config.Class. "" = the
	// cloud-controller-manager's service controller.
	Class     string
	Classless bool
	// Finalizer is the class controller's finalizer when it is not Class
	// (lbclass.Config.Finalizer): see loadbalancer.Config.Finalizer.
	Finalizer string
	// Announcer tells the load balancer of router restarts. Nil means a
	// pcp.Client listening for the PCP ANNOUNCE of the router (the host of
	// gateway.url, else the default gateway) while background work runs:
	// a router that announces its restart (miniupnpd with NAT-PMP/PCP on)
	// is repaired at once, others at the next probe.
	Announcer loadbalancer.Announcer

	// pinholeDial, when set, opens the UPnP pinhole client's connections
	// (tests: a fake router on loopback that takes them for the node's).
	pinholeDial func(ctx context.Context, network, address string) (net.Conn, error)
	// interfaces, when set, returns this host's interfaces and their
	// addresses; nil reads this host's.
	interfaces func() ([]hostinfo.Interface, error)
}

// New builds the edge provider from cfg: a provider.Cloud named "edge" made
// of a loadbalancer.LoadBalancer on the router and a provider.InstancesV2
// for nodes without a cloud API, reporting HasClusterID true (router
// mappings are owned per cluster, by --cluster-name). With gateway.ipv6
// enabled the load balancer's Pinholes are igd/pinhole's UPnP client (one
// per node address) or igd/pcp's Pinholes, under the mappings' secret. cfg is validated; the
// node name is taken from cfg alone (Factory fills it from $NODE_NAME); with
// no node name, a load balancer for a secure-mode router finds its own node
// by matching its address toward the router against the nodes' addresses,
// and one with UPnP pinholes (and no secure mode) by the IPv4 address
// beside this host's global IPv6 address first.
// New makes no network call: the router is discovered on first use.
func New(cfg Config, opts Options) (*provider.Cloud, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var pcpClient *pcp.Client // the router's PCP server: announcements, and PCP writes
	if opts.Announcer == nil || (opts.Client == nil && cfg.Gateway.usesPCP()) {
		var server netip.AddrPort
		if u, err := url.Parse(cfg.Gateway.URL); err == nil && cfg.Gateway.URL != "" {
			if a, err := netip.ParseAddr(u.Hostname()); err == nil {
				server = netip.AddrPortFrom(a.Unmap(), pcp.Port)
			}
		}
		c, err := pcp.NewClient(pcp.Config{Server: server})
		if err != nil {
			return nil, fmt.Errorf("edge: router's PCP server: %w", err)
		}
		pcpClient = c
	}
	var secret []byte // the cluster's PCP secret: mappings' and pinholes' nonces
	if cfg.Gateway.usesPCP() && (opts.Client == nil || cfg.Gateway.IPv6.Enabled) {
		s, err := readSecret(cfg.Gateway.PCPSecretFile)
		if err != nil {
			return nil, err
		}
		secret = s
	}
	interfaces := opts.interfaces
	if interfaces == nil {
		interfaces = hostinfo.Interfaces
	}
	client := opts.Client
	if client == nil {
		upnp, err := igd.NewClient(cfg.Gateway.ClientConfig())
		if err != nil {
			return nil, fmt.Errorf("edge: router client: %w", err)
		}
		client = upnp
		if cfg.Gateway.IPv6.Enabled && !cfg.Gateway.usesPCP() && cfg.LoadBalancer.NodeName == "" && !cfg.LoadBalancer.SecureMode {
			client = selfByAddress{UPnPClient: upnp, iface: cfg.Gateway.IPv6.Interface, interfaces: interfaces}
		}
		if cfg.Gateway.usesPCP() {
			bc := pcp.BackendConfig{UPnP: upnp, PCP: pcpClient, Secret: secret, FallBack: cfg.Gateway.Protocol != ProtocolPCP}
			if cfg.Gateway.Protocol == ProtocolPCPOnly {
				bc.UPnP, bc.FallBack = nil, false
			}
			b, err := pcp.NewBackend(bc)
			if err != nil {
				return nil, fmt.Errorf("edge: gateway.pcpSecretFile %s: %w", cfg.Gateway.PCPSecretFile, err)
			}
			client = b
		}
	}
	var pinholes loadbalancer.PinholeClient // nil: IPv6 not served
	if cfg.Gateway.IPv6.Enabled {
		p, err := newPinholes(cfg.Gateway, secret, opts.pinholeDial, interfaces)
		if err != nil {
			return nil, err
		}
		pinholes = p
	}
	announcer := opts.Announcer
	if announcer == nil {
		announcer = pcpClient
	}
	lease := cfg.LoadBalancer.Lease.Duration // 0: the library's default
	if cfg.LoadBalancer.PermanentLease {
		lease = loadbalancer.PermanentLease
	}
	var probe time.Duration // 0: the library's default
	if cfg.Gateway.Protocol == ProtocolPCP || cfg.Gateway.Protocol == ProtocolPCPOnly {
		// The router announces its restarts, and every renewal checks
		// its epoch: no probe between renewals.
		probe = loadbalancer.ProbeAtRenewal
	}
	lb, err := loadbalancer.New(loadbalancer.Config{
		Client:                   client,
		Pinholes:                 pinholes,
		Lease:                    lease,
		RenewInterval:            cfg.LoadBalancer.RenewInterval.Duration,
		ProbeInterval:            probe,
		Services:                 cfg.LoadBalancer.Services,
		Class:                    opts.Class,
		Classless:                opts.Classless,
		Finalizer:                opts.Finalizer,
		Announcer:                announcer,
		NodeName:                 cfg.LoadBalancer.NodeName,
		SecureMode:               cfg.LoadBalancer.SecureMode,
		AllowNonPublicExternalIP: cfg.LoadBalancer.AllowNonPublicExternalIP,
		Admit:                    cfg.LoadBalancer.admit(),
		MaxMappings:              cfg.LoadBalancer.MaxMappings,
	})
	if err != nil {
		return nil, fmt.Errorf("edge: load balancer: %w", err)
	}
	instances, err := provider.NewInstancesV2(ProviderName, instancesConfig(cfg.Instances))
	if err != nil {
		return nil, fmt.Errorf("edge: instances: %w", err)
	}
	return provider.New(ProviderName, provider.Config{
		LoadBalancer: lb,
		InstancesV2:  instances,
		ClusterID:    true,
	})
}

// readSecret reads the PCP secret from path (gateway.pcpSecretFile) and
// refuses one that could be guessed; a short one is left for its user to
// refuse.
func readSecret(path string) ([]byte, error) {
	secret, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("edge: gateway.pcpSecretFile: %w", err)
	}
	secret = bytes.TrimSpace(secret)
	if bits := secretBits(secret); len(secret) >= pcp.MinSecretLen && bits < minSecretBits {
		return nil, fmt.Errorf("edge: gateway.pcpSecretFile %s: the secret could be guessed (an estimated %d bits of entropy, at least %d needed): make a random one, for example head -c 32 /dev/urandom | base64", path, bits, minSecretBits)
	}
	return secret, nil
}

// minSecretBits is the least entropy secretBits must find in a PCP secret:
// below what 32 random bytes ever score (about 130 at the least in 100,000
// draws), above a word repeated (about 90).
const minSecretBits = 100

// secretBits estimates the entropy of a secret, in bits, to refuse one
// that could be guessed: its length times the Shannon entropy of its bytes'
// frequencies, or of the differences between neighbouring bytes when that is
// less (a run such as "abcdef..." or a repeated pattern). 32 random bytes
// score about 150, their base64 about 210, "abc...xyz0123456789" 6 and
// 32 × "a" 0. An estimate from one sample, below the true entropy of a
// random secret.
func secretBits(s []byte) int {
	if len(s) < 2 {
		return 0
	}
	diffs := make([]byte, len(s)-1)
	for i := range diffs {
		diffs[i] = s[i+1] - s[i]
	}
	return int(min(float64(len(s))*shannon(s), float64(len(diffs))*shannon(diffs)))
}

// shannon is the Shannon entropy of b's byte frequencies, in bits per byte.
func shannon(b []byte) float64 {
	var counts [256]int
	for _, c := range b {
		counts[c]++
	}
	var h float64
	for _, n := range counts {
		if n > 0 {
			p := float64(n) / float64(len(b))
			h -= p * math.Log2(p)
		}
	}
	return h
}

// usesPCP reports whether mappings are written through PCP: protocol "pcp"
// or "pcp-only", or "auto" with a secret.
func (g GatewayConfig) usesPCP() bool {
	return g.Protocol == ProtocolPCP || g.Protocol == ProtocolPCPOnly || (g.Protocol != ProtocolUPnP && g.PCPSecretFile != "")
}

// ClientConfig is the router client's configuration the "gateway" section
// gives: what New uses when Options.Client is nil.
func (g GatewayConfig) ClientConfig() igd.Config {
	return igd.Config{
		RootDescURL:      g.URL,
		DiscoveryTimeout: g.DiscoveryTimeout.Duration,
		CallTimeout:      g.CallTimeout.Duration,
	}
}

// adoptedSchemes are the ProviderID schemes the edge provider treats as its
// own when a node's ProviderID is exactly SCHEME://<node-name>: k3s's
// embedded cloud controller gives every node "k3s://<node-name>" (RKE2's,
// the same code, "rke2://<node-name>"). Such IDs name no machine of any
// cloud, so a cluster that moves from the embedded controller to edge-ccm
// keeps its nodes, which then get edge's metadata; see provider.InstancesV2Config.
var adoptedSchemes = []string{"k3s", "rke2"}

// instancesConfig translates the "instances" section.
func instancesConfig(in InstancesConfig) provider.InstancesV2Config {
	out := provider.InstancesV2Config{Zone: in.Zone, Region: in.Region, InstanceType: in.InstanceType, AdoptSchemes: adoptedSchemes}
	if len(in.Nodes) > 0 {
		out.Nodes = make(map[string]provider.NodeInstance, len(in.Nodes))
	}
	for name, n := range in.Nodes {
		node := provider.NodeInstance{Zone: n.Zone, Region: n.Region, InstanceType: n.InstanceType}
		for _, a := range n.Addresses {
			node.Addresses = append(node.Addresses, v1.NodeAddress{Type: v1.NodeAddressType(a.Type), Address: a.Address})
		}
		out.Nodes[name] = node
	}
	return out
}
