package loadbalancer

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
)

var _ cloudprovider.LoadBalancer = (*LoadBalancer)(nil)

// LoadBalancer serves Services of type LoadBalancer with UPnP IGD port
// mappings; Initialize and Run start its background work. Safe for concurrent use.
type LoadBalancer struct {
	cfg            Config // read-only after New, defaults filled in
	permanentOnce  sync.Once
	passes, probes atomic.Int64    // finished background passes and probes
	bg             background      // the background work's lifecycle (lifecycle.go)
	mode           routerMode      // chosen in New from what cfg.Client declares (mode.go)
	families       []family        // chosen in New: IPv4 mappings, then IPv6 pinholes (family.go)
	pinholeScope   AnyHostPinholes // cfg.Pinholes, when it says whom it opens for (nil: its own host only)
	pinholeProber  PinholeProber   // cfg.Pinholes, when it can check a pinhole (nil: it cannot)
	pinholeHost    OwnHostPinholes // cfg.Pinholes, when it says this host's IPv6 addresses (nil: it cannot)

	// mu guards the fields below; never held across a router or API call.
	mu        sync.Mutex
	cluster   string                   // from Config or the first call
	external  netip.Addr               // last usable external IP, for arbitration only (zero: none)
	nodeAddrs map[netip.Addr]string    // every node address seen, to its node
	services  map[string]*serviceState // by owner token
	self      string                   // this process's node when Config.NodeName is empty ("" until found)
	selfAddr  netip.Addr               // this host's IPv4 address toward the router when self was found (invalid: none)
	probeSeq  int                      // picks the mapping the next probe reads
}

// New returns a LoadBalancer configured by cfg. It makes no router call.
func New(cfg Config) (*LoadBalancer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	lb := &LoadBalancer{cfg: cfg, cluster: cfg.ClusterName, nodeAddrs: make(map[netip.Addr]string),
		services: make(map[string]*serviceState), bg: background{hinted: make(map[types.UID]bool), wake: make(chan struct{}, 1)}}
	lb.mode = newMode(lb)
	lb.families = newFamilies(lb)
	lb.pinholeScope, _ = cfg.Pinholes.(AnyHostPinholes)
	lb.pinholeProber, _ = cfg.Pinholes.(PinholeProber)
	lb.pinholeHost, _ = cfg.Pinholes.(OwnHostPinholes)
	return lb, nil
}

// clusterName returns the cluster name background work uses ("": unknown).
func (lb *LoadBalancer) clusterName() string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.cluster
}
