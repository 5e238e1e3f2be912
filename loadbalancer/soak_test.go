package loadbalancer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/fake/cluster"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/provider"
)

// The soak (make soak): the real upstream service controller (through
// fake/cluster) or a class controller (provider/lbclass) over the real
// LoadBalancer, one per process as a deployment of edge-ccm has, against a fake router or miniupnpd, under a random schedule
// of cluster changes and router faults drawn from a seed. The schedule
// pauses at quiet points; the harness then waits for the invariants
// (soak_check_test.go) to hold, up to the mode's bound. Foreign mappings
// are watched all along. The schedule is a pure function of the seed (it
// never reads what the controllers did), so a seed replays it on the fake.
var (
	soakRun      = flag.Bool("soak", false, "run TestSoak (see make soak)")
	soakBackend  = flag.String("soak.backend", "fake", "the router: fake or lab")
	soakMode     = flag.String("soak.mode", "upnp", "the router mode: upnp, igd1, secure, pcp or pcp-only")
	soakDuration = flag.Duration("soak.duration", 90*time.Second, "how long the schedule runs")
	soakSeed     = flag.Uint64("soak.seed", 0, "the schedule's seed; 0 picks one and prints it")
	soakVerbose  = flag.Bool("soak.log", false, "print each operation as it runs")
	soakKlog     = flag.String("soak.klog", "", "a file to write the processes' logs to (verbosity 4), for a violation's cause")
	soakFamilies = flag.String("soak.families", "ipv4", "the IP families: ipv4 (IPv4-only Services) or dual (IPv4-only, IPv6-only and dual-stack Services, nodes with global IPv6 addresses, and IPv6 pinholes through UPnP in modes upnp and secure, through PCP in modes pcp and pcp-only; see soak_dual_test.go)")
	soakDeploy   = flag.String("soak.deploy", "", "the deployment each process is: ccm (upstream's service controller, classless Services) or standalone (the class controller, soakClass and classless Services); \"\" = by the seed, ccm when odd")
)

// soakClass is the spec.loadBalancerClass served by the class controller.
const soakClass = "ccmkit.io/soak"

// soakSecret is the PCP secret of the soak's cluster.
var soakSecret = []byte("soak-secret-soak-secret-soak-sec")

// Timing of every CCM process of the soak: short leases and passes, so a
// soak of minutes sees renewals and repairs.
const (
	soakLease   = MinLease
	soakRenew   = 5 * time.Second
	soakProbe   = time.Second
	soakMaxSvcs = 10
	// soakFingerprintOps is how many operations the prefix fingerprint
	// covers: runs of one seed compare on it whatever their length.
	soakFingerprintOps = 50
	soakMaxNode        = 6
)

// soakWorld is the router side of a soak: the fake router or the lab.
type soakWorld interface {
	// nodeAddr is the address of node slot i (0 is the CCM's host).
	nodeAddr(i int) netip.Addr
	// maxNodes is how many node slots there are.
	maxNodes() int
	// ccmClient returns the router client (and announcer, or nil) of a new
	// CCM process running on node slot 0.
	ccmClient(t *testing.T) (igd.Client, Announcer)
	// table reads the router's whole table.
	table(ctx context.Context) ([]igd.Mapping, error)
	// externalIP is the address the router reports now (the zero Addr
	// while the WAN is down).
	externalIP() netip.Addr
	// reboot restarts the router (empty table); wipe empties the table
	// without a restart. Foreign mappings are placed again afterwards.
	reboot(ctx context.Context)
	wipe(ctx context.Context)
	// setWAN sets the WAN address (the zero Addr: down); false where the
	// world cannot (the lab's is fixed): the schedule draws again.
	setWAN(ctx context.Context, a netip.Addr) bool
	// foreignAdd has who (soakLAN or soakOther) map k to itself with
	// description desc; foreignDelete has it delete k, if it holds it.
	foreignAdd(ctx context.Context, who string, k igd.Key, desc string) error
	foreignDelete(ctx context.Context, who string, k igd.Key) error
	// loseReplies makes the next n replies to the CCM's writes get lost
	// after the router acted; slowReplies delays the next n by d.
	loseReplies(n int)
	slowReplies(n int, d time.Duration)
	// calm ends every fault still armed (lost or slow replies).
	calm()
	// rogue has a LAN host answer SSDP searches as a router claiming a
	// public address (on true), or stop; it returns the schedule's line,
	// "" where the CCM does not discover its router by SSDP.
	rogue(on bool) string
	// crashed reports whether the router process died.
	crashed() bool
	// writesChecked counts the CCM writes checked against the foreign
	// mappings as they happened.
	writesChecked() int
	close()
}

// soakPort is one port of a modelled Service.
type soakPort struct {
	name     string
	proto    v1.Protocol
	port     int32
	nodePort int32
}

// soakSvc is the schedule's model of a Service.
type soakSvc struct {
	ns, name  string
	ports     []soakPort
	local     bool
	annotated bool
	class     string
	lb        bool // type LoadBalancer, else ClusterIP
	// families is spec.ipFamilies (nil: IPv4, as before the dual-stack
	// dimension), policy spec.ipFamilyPolicy.
	families  []v1.IPFamily
	policy    v1.IPFamilyPolicy
	endpoints map[string]bool
	nextPort  int
}

// soakNode is the schedule's model of a node.
type soakNode struct {
	name     string
	slot     int
	ready    bool
	excluded bool
	// prefix is the IPv6 prefix of the node's global address
	// (soakGUA), 0 while it reports none (dual only).
	prefix int
}

// soakModel is the state the schedule draws from: what it asked for, never
// what the controllers did.
type soakModel struct {
	rng       *rand.Rand
	svcs      []*soakSvc
	nodes     []*soakNode
	svcSeq    int
	nodeSeq   int
	nodePorts map[int32]bool
	nextNP    int32
	foreign   map[igd.Key]string // keys the schedule had the LAN host and the other cluster take
	wanSeq    int
	slots     int
}

// Ports the Services draw from: few, so that they collide with each other,
// the LAN host and the other cluster.
var soakPorts = []struct {
	proto v1.Protocol
	port  int32
}{
	{v1.ProtocolTCP, 8080}, {v1.ProtocolTCP, 8081}, {v1.ProtocolTCP, 8082}, {v1.ProtocolTCP, 8083},
	{v1.ProtocolTCP, 8443}, {v1.ProtocolTCP, 9000}, {v1.ProtocolTCP, 9001}, {v1.ProtocolTCP, 9002},
	{v1.ProtocolUDP, 5353}, {v1.ProtocolUDP, 8080}, {v1.ProtocolUDP, 9000},
}

// Hosts of the soak that are not nodes of its cluster: a LAN host, and a
// node of another cluster behind the same router.
const (
	soakLAN   = "the LAN host"
	soakOther = "the other cluster"
)

func (m *soakModel) allocNodePort() int32 {
	for {
		m.nextNP++
		if m.nextNP > 32767 {
			m.nextNP = 30000
		}
		if !m.nodePorts[m.nextNP] {
			m.nodePorts[m.nextNP] = true
			return m.nextNP
		}
	}
}

func (m *soakModel) freeNodePorts(s *soakSvc) {
	for _, p := range s.ports {
		delete(m.nodePorts, p.nodePort)
	}
}

// newPort returns a port s has no port of (by protocol and port).
func (m *soakModel) newPort(s *soakSvc) (soakPort, bool) {
	var free []int
	for i, c := range soakPorts {
		if !slices.ContainsFunc(s.ports, func(p soakPort) bool { return p.proto == c.proto && p.port == c.port }) {
			free = append(free, i)
		}
	}
	if len(free) == 0 {
		return soakPort{}, false
	}
	c := soakPorts[free[m.rng.IntN(len(free))]]
	s.nextPort++
	np := int32(0)
	if s.lb {
		np = m.allocNodePort()
	}
	return soakPort{name: fmt.Sprintf("p%d", s.nextPort), proto: c.proto, port: c.port, nodePort: np}, true
}

// moveEndpoints gives s endpoints on a random set of nodes, each ready or not.
func (m *soakModel) moveEndpoints(s *soakSvc) {
	s.endpoints = map[string]bool{}
	for _, n := range m.nodes {
		if m.rng.IntN(3) == 0 {
			s.endpoints[n.name] = m.rng.IntN(4) != 0
		}
	}
}

func (s *soakSvc) String() string {
	var ps []string
	for _, p := range s.ports {
		ps = append(ps, fmt.Sprintf("%s:%s/%d->%d", p.name, p.proto, p.port, p.nodePort))
	}
	typ := "LoadBalancer"
	if !s.lb {
		typ = "ClusterIP"
	}
	pol := "Cluster"
	if s.local {
		pol = "Local"
	}
	class := "-"
	if s.class != "" {
		class = s.class
	}
	var eps []string
	for _, n := range slices.Sorted(maps.Keys(s.endpoints)) {
		eps = append(eps, fmt.Sprintf("%s:%t", n, s.endpoints[n]))
	}
	fams := ""
	if s.families != nil {
		fams = fmt.Sprintf(" families=%v %s", s.families, s.policy)
	}
	return fmt.Sprintf("%s/%s %s %s annotated=%t class=%s%s ports=[%s] endpoints=[%s]", s.ns, s.name, typ, pol, s.annotated, class, fams, strings.Join(ps, " "), strings.Join(eps, " "))
}

// object is s as the API server holds it (spec and metadata only).
func (s *soakSvc) object() *v1.Service {
	o := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.name}}
	s.apply(o)
	return o
}

// apply writes s's spec and opt-in annotation onto o.
func (s *soakSvc) apply(o *v1.Service) {
	if o.Annotations == nil {
		o.Annotations = map[string]string{}
	}
	delete(o.Annotations, AnnotationLoadBalancerType)
	if s.annotated {
		o.Annotations[AnnotationLoadBalancerType] = AnnotationValue
	}
	o.Spec.Type = v1.ServiceTypeClusterIP
	o.Spec.LoadBalancerClass = nil
	o.Spec.ExternalTrafficPolicy = ""
	if s.lb {
		o.Spec.Type = v1.ServiceTypeLoadBalancer
		o.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
		if s.local {
			o.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		}
		if s.class != "" {
			o.Spec.LoadBalancerClass = ptr.To(s.class)
		}
	}
	o.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol}
	o.Spec.IPFamilyPolicy = nil
	if s.families != nil {
		o.Spec.IPFamilies = slices.Clone(s.families)
		o.Spec.IPFamilyPolicy = ptr.To(s.policy)
	}
	o.Spec.Ports = nil
	for _, p := range s.ports {
		o.Spec.Ports = append(o.Spec.Ports, v1.ServicePort{Name: p.name, Protocol: p.proto, Port: p.port, NodePort: p.nodePort})
	}
}

// slice is s's EndpointSlice.
func (s *soakSvc) slice() *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.name + "-eps",
			Labels: map[string]string{discoveryv1.LabelServiceName: s.name}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for i, n := range slices.Sorted(maps.Keys(s.endpoints)) {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.244.0.%d", i+1)},
			NodeName:   ptr.To(n),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(s.endpoints[n])},
		})
	}
	return es
}

// soakNodeObject is node n with address addr.
func soakNodeObject(n *soakNode, addr netip.Addr) *v1.Node {
	o := newNode(n.name, addr)
	o.UID = ""
	if !n.ready {
		notReady(o)
	}
	if n.excluded {
		o.Labels = map[string]string{v1.LabelNodeExcludeBalancers: "true"}
	}
	return o
}

// soakProcess is one process: its LoadBalancer under upstream's service
// controller or under a class controller (see soak.deploy).
type soakProcess struct {
	id     int
	h      *cluster.Harness
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *soakProcess) stop() {
	p.h.Stop()
	p.cancel()
	<-p.done
}

// soak is one run.
type soak struct {
	t    *testing.T
	mode string
	// dual: -soak.families=dual (soak_dual_test.go).
	dual bool
	// deploy is what each process runs, as a deployment does: one
	// LoadBalancer, handed Services by upstream's service controller
	// ("ccm": classless ones) or by the class controller ("standalone":
	// those of soakClass and, with Classless, classless ones).
	deploy string
	world  soakWorld
	model  *soakModel
	client *k8sfake.Clientset
	procs  []*soakProcess
	procID int

	ops, faults, checks int
	// wiped is when the router's table was last wiped or the router
	// rebooted: blind mode finds a wipe only as each lease comes up for
	// renewal, and a Service served nowhere holds its key until its lease
	// ends (an announcement is no proof).
	wiped       time.Time
	current     atomic.Int64 // ops, for the hooks and the watch
	converge    []time.Duration
	retries     soakRetries              // the controllers' backoff, per Service
	nodeGone    map[netip.Addr]time.Time // when the node at an address was last deleted
	procStart   time.Time                // when the latest process started
	klogFile    *os.File                 // -soak.klog
	fingerprint hash.Hash64              // of the operations asked for
	prefix      uint64                   // the fingerprint of the first soakFingerprintOps

	// mu guards the fields below it: the log and the violations, written
	// by the schedule and by the router's hooks.
	mu         sync.Mutex
	log        []string
	violations []string
	reported   int
}

// processLogger returns the logger of process id: -soak.klog's file, or
// none.
func (s *soak) processLogger(id int) klog.Logger {
	if *soakKlog == "" {
		return logr.Discard()
	}
	if s.klogFile == nil {
		f, err := os.Create(*soakKlog)
		if err != nil {
			s.t.Fatal(err)
		}
		s.t.Cleanup(func() { f.Close() })
		s.klogFile = f
	}
	return textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(s.klogFile), textlogger.Verbosity(4))).WithValues("process", id)
}

// liveAddr reports whether a node of the schedule has address a now.
func (s *soak) liveAddr(a netip.Addr) bool {
	for _, n := range s.model.nodes {
		if s.world.nodeAddr(n.slot) == a {
			return true
		}
	}
	return false
}

// logf records one line of the schedule.
func (s *soak) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.log = append(s.log, line)
	s.mu.Unlock()
	if *soakVerbose {
		fmt.Println(line)
	}
}

// violateNow records a violation seen as it happened (a hook, the watch of
// other owners' mappings), with the operation the schedule was at.
func (s *soak) violateNow(format string, args ...any) {
	s.violate("at op %d: %s", s.current.Load(), fmt.Sprintf(format, args...))
}

// violate records a violation.
func (s *soak) violate(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

// soakSecureNode is the node the CCM runs on (slot 0).
const soakSecureNode = "node-0"

// newProcess starts a process on the soak's cluster (a new cluster holding
// objs for the first): one LoadBalancer, as a deployment of edge-ccm runs,
// handed Services by upstream's service controller (s.deploy "ccm") or by
// the class controller, classless ones too (s.deploy "standalone").
func (s *soak) newProcess(ctx context.Context, objs []k8sruntime.Object) (*soakProcess, error) {
	client, ann := s.world.ccmClient(s.t)
	cfg := Config{Client: client, Lease: soakLease, RenewInterval: soakRenew, ProbeInterval: soakProbe, Announcer: ann,
		SecureMode: s.mode == "secure"}
	if s.dual {
		cfg.Pinholes = s.world.(soakPinholeWorld).pinholeClient(s.t)
	}
	if cfg.SecureMode {
		cfg.NodeName = soakSecureNode
	}
	standalone := s.deploy == "standalone"
	if standalone {
		cfg.Class, cfg.Classless = soakClass, true
	}
	lb, err := New(cfg)
	if err != nil {
		return nil, err
	}
	logger := s.processLogger(s.procID + 1)
	pcfg := provider.Config{ClusterID: true, Logger: logger} // the ccm deployment's background work logs there too
	var classes []cluster.Class
	recorded := soakLB{LoadBalancer: lb, retries: &s.retries}
	if standalone { // the cloud has no load balancer: the service controller leaves Services alone
		classes = []cluster.Class{{Name: soakClass, LoadBalancer: recorded, Classless: true}}
	} else { // the provider initializes and runs it
		pcfg.LoadBalancer = recorded
	}
	cloud, err := provider.New("edge", pcfg)
	if err != nil {
		return nil, err
	}
	h, err := cluster.Start(ctx, cluster.Config{Cloud: cloud, ClusterName: testCluster, Objects: objs, Client: s.client,
		Classes: classes, Logger: logger})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	p := &soakProcess{h: h, cancel: cancel, done: make(chan struct{})}
	if standalone {
		if err := lb.Initialize(ctx, cluster.ClientBuilder(h.Client)); err != nil {
			cancel()
			h.Stop()
			return nil, err
		}
		go func() {
			defer close(p.done)
			lb.Run(runCtx)
		}()
	} else {
		close(p.done)
	}
	s.procID++
	s.procStart = time.Now()
	p.id = s.procID
	s.client = h.Client
	return p, nil
}

func TestSoak(t *testing.T) {
	if !*soakRun {
		t.Skip("the soak runs with -soak (make soak)")
	}
	seed := *soakSeed
	if seed == 0 {
		seed = rand.Uint64()%1_000_000 + 1
	}
	fmt.Printf("soak: backend %s, mode %s, families %s, duration %s, seed %d (make soak BACKEND=%s MODE=%s FAMILIES=%s DURATION=%s SEED=%d)\n",
		*soakBackend, *soakMode, *soakFamilies, *soakDuration, seed, *soakBackend, *soakMode, *soakFamilies, *soakDuration, seed)
	if !slices.Contains([]string{"upnp", "igd1", "secure", "pcp", "pcp-only"}, *soakMode) {
		t.Fatalf("-soak.mode %q: must be upnp, igd1, secure, pcp or pcp-only", *soakMode)
	}
	deploy := *soakDeploy
	if deploy == "" {
		deploy = []string{"standalone", "ccm"}[seed%2]
	}
	if deploy != "ccm" && deploy != "standalone" {
		t.Fatalf("-soak.deploy %q: must be ccm or standalone", deploy)
	}
	fmt.Printf("soak: each process runs one load balancer as the %s deployment does\n", deploy)
	if *soakFamilies != "ipv4" && *soakFamilies != "dual" {
		t.Fatalf("-soak.families %q: must be ipv4 or dual", *soakFamilies)
	}
	s := &soak{t: t, mode: *soakMode, deploy: deploy, dual: *soakFamilies == "dual", fingerprint: fnv.New64a()}
	if s.dual && s.mode == "igd1" {
		t.Fatalf("-soak.families dual: mode igd1 has no IPv6 firewall control (IGD:1); use upnp, secure, pcp or pcp-only")
	}
	if s.dual {
		fmt.Printf("soak: dual-stack: IPv4, IPv6 and dual-stack Services; pinholes through %s\n", s.pinholeProtocol())
	}
	var err error
	switch *soakBackend {
	case "fake":
		s.world, err = newFakeWorld(t, s)
	case "lab":
		s.world, err = startLabWorld(t, s)
	default:
		err = fmt.Errorf("-soak.backend %q: must be fake or lab", *soakBackend)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.world.(soakPinholeWorld); s.dual && !ok {
		t.Fatalf("-soak.families dual: backend %s opens no IPv6 pinholes yet", *soakBackend)
	}
	baseline := runtime.NumGoroutine() // the router's own (the lab's) stay
	s.model = &soakModel{rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), nodePorts: map[int32]bool{}, nextNP: 30000,
		foreign: map[igd.Key]string{}, slots: s.world.maxNodes()}
	s.run(seed, baseline)
}

// run runs the schedule until the duration is over, then stops everything
// and prints the last line.
func (s *soak) run(seed uint64, baseline int) {
	t := s.t
	ctx := context.Background()
	start := time.Now()
	// The first nodes: slot 0 (the CCM's host) and two more.
	var objs []k8sruntime.Object
	for i := range 3 {
		n := &soakNode{name: fmt.Sprintf("node-%d", i), slot: i, ready: true}
		s.model.nodes = append(s.model.nodes, n)
		s.model.nodeSeq++
		if s.dual {
			n.prefix = 1
		}
		objs = append(objs, s.nodeObject(n))
	}
	p, err := s.newProcess(ctx, objs)
	if err != nil {
		t.Fatal(err)
	}
	s.procs = []*soakProcess{p}
	if s.dual {
		if err := s.world.(soakPinholeWorld).plantPinholes(ctx); err != nil {
			t.Fatalf("opening other hosts' pinholes: %v", err)
		}
	}
	stopWatch := s.watchForeign()

	for n := 0; time.Since(start) < *soakDuration; n++ {
		burst := 8 + s.model.rng.IntN(12)
		for range burst {
			s.step(ctx)
			time.Sleep(time.Duration(20+s.model.rng.IntN(300)) * time.Millisecond)
			s.reap(ctx)
		}
		s.quiet(ctx, seed)
	}
	stopWatch()
	for _, p := range s.procs {
		p.stop()
	}
	s.procs = nil
	if s.world.crashed() {
		s.violate("the router process crashed")
	}
	s.world.close()
	s.checkGoroutines(baseline)
	s.report(seed)
	s.mu.Lock()
	v := len(s.violations)
	s.mu.Unlock()
	fmt.Printf("soak: seed %d, schedule fingerprint %016x, of its first %d operations %016x (the same seed replays the same schedule)\n",
		seed, s.fingerprint.Sum64(), soakFingerprintOps, s.prefix)
	p50, pmax := percentiles(s.converge)
	line := fmt.Sprintf("soak: %d operations, %d faults, %d checks, %d violations, converged p50 %.1f s / max %.1f s",
		s.ops, s.faults, s.checks+s.world.writesChecked(), v, p50.Seconds(), pmax.Seconds())
	fmt.Println(line)
	if v > 0 {
		t.Fail()
	}
}

// bound is how long a quiet point waits for the invariants: a pass
// (renewal interval) and a probe, twice, plus the time the service
// controller's first retry waits. Blind, what it cannot find (see the
// package documentation) waits for a lease: while a mapping that is left
// to its lease (see check) is in the table the wait goes on till that long
// after it is gone, and a table wiped (without a restart) less than a lease
// ago is repaired as the leases it lost come up for renewal, so the wait
// goes on till that long after a lease from the wipe; at most a lease (and
// the second the router rounds it up by) more. So, in every mode, is a
// mapping to a node deleted less than base before or after the latest
// process started: that process may never have read it while the node was
// a node, and cannot prove it ours. A Service whose last sync
// failed is waited for until its controller retries it (see soakRetryMin),
// then base again. A pinhole no status records (its opening answer lost,
// its process stopped) ends with its first lease, four renewal intervals,
// within base.
func (s *soak) bound() (base, most time.Duration) {
	base = 2*(soakRenew+soakProbe) + 10*time.Second
	return base, base + soakLease + time.Second
}

func percentiles(ds []time.Duration) (p50, pmax time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)-1]
}

// checkGoroutines waits for the goroutines to come back to baseline.
func (s *soak) checkGoroutines(baseline int) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= baseline {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			s.violate("goroutines: %d after Stop, %d before the soak:\n%s", n, baseline, buf)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// report prints the violations not reported yet, with the schedule so far
// and the router's table.
func (s *soak) report(seed uint64) {
	s.mu.Lock()
	vs := slices.Clone(s.violations[s.reported:])
	s.reported = len(s.violations)
	log := slices.Clone(s.log)
	s.mu.Unlock()
	if len(vs) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %d violations (seed %d, make soak BACKEND=%s MODE=%s FAMILIES=%s SEED=%d):\n", len(vs), seed, *soakBackend, s.mode, *soakFamilies, seed)
	for _, v := range vs {
		fmt.Fprintf(&b, "  VIOLATION %s\n", v)
	}
	b.WriteString("schedule so far:\n")
	for _, l := range log {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if tab, err := s.world.table(ctx); err != nil {
		fmt.Fprintf(&b, "router's table: %v\n", err)
	} else {
		fmt.Fprintf(&b, "router's table (external IP %s):\n", s.world.externalIP())
		for _, m := range tab {
			fmt.Fprintf(&b, "  %s -> %s:%d %q lease %s\n", m.Key(), m.InternalClient, m.InternalPort, m.Description, m.Lease)
		}
	}
	fmt.Print(b.String())
}

// reap deletes the Services marked for deletion once their finalizers are
// gone, as the API server does.
func (s *soak) reap(ctx context.Context) {
	list, err := s.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, o := range list.Items {
		if o.DeletionTimestamp != nil && len(o.Finalizers) == 0 {
			_ = s.client.CoreV1().Services(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
			_ = s.client.DiscoveryV1().EndpointSlices(o.Namespace).Delete(ctx, o.Name+"-eps", metav1.DeleteOptions{})
		}
	}
}

// step draws one operation from the model and carries it out.
func (s *soak) step(ctx context.Context) {
	m := s.model
	type op struct {
		weight int
		fault  bool
		do     func() string // "" when it does not apply now
	}
	ops := []op{
		{8, false, func() string { return s.createService(ctx) }},
		{4, false, func() string { return s.deleteService(ctx) }},
		{10, false, func() string { return s.changeService(ctx) }},
		{4, false, func() string { return s.moveEndpoints(ctx) }},
		{5, false, func() string { return s.changeNode(ctx) }},
		{2, true, func() string {
			s.world.reboot(ctx)
			s.wiped = time.Now() // blind, a Service served nowhere holds its key until its lease ends
			return "fault: the router reboots"
		}},
		{1, true, func() string {
			s.world.wipe(ctx)
			s.wiped = time.Now()
			return "fault: the router's table is wiped"
		}},
		{2, true, func() string {
			n := 1 + m.rng.IntN(3)
			s.world.loseReplies(n)
			return fmt.Sprintf("fault: the next %d replies to the CCM's writes are lost", n)
		}},
		{2, true, func() string {
			n, d := 1+m.rng.IntN(5), time.Duration(100+m.rng.IntN(1500))*time.Millisecond
			s.world.slowReplies(n, d)
			return fmt.Sprintf("fault: the next %d replies to the CCM take %s", n, d)
		}},
		{1, true, func() string {
			if !s.world.setWAN(ctx, netip.Addr{}) {
				return ""
			}
			return "fault: the WAN address goes away"
		}},
		{2, true, func() string {
			m.wanSeq++
			a := netip.AddrFrom4([4]byte{198, 51, 101, byte(10 + m.wanSeq%200)})
			if !s.world.setWAN(ctx, a) {
				return ""
			}
			return "fault: the WAN address changes to " + a.String()
		}},
		{3, true, func() string { return s.foreignTake(ctx, soakLAN, "lan-host app") }},
		{2, true, func() string {
			return s.foreignTake(ctx, soakOther, newOwner("other", "default", "web").description("http"))
		}},
		{4, true, func() string { return s.foreignRelease(ctx) }},
		{1, true, func() string { return s.world.rogue(m.rng.IntN(2) == 0) }},
		{1, true, func() string { return s.restart(ctx) }},
		{1, true, func() string { return s.handOver(ctx) }},
	}
	if s.dual {
		for _, o := range s.dualOps(ctx) {
			ops = append(ops, op(o))
		}
	}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	for {
		r := m.rng.IntN(total)
		for _, o := range ops {
			if r -= o.weight; r >= 0 {
				continue
			}
			line := o.do()
			if line == "" {
				break // does not apply: draw again
			}
			s.ops++
			s.current.Store(int64(s.ops))
			if o.fault {
				s.faults++
			}
			// The schedule's fingerprint: what was asked, not what the
			// router answered (errors end each line).
			what, _, _ := strings.Cut(line, " (error: ")
			s.fingerprint.Write([]byte(what + "\n"))
			if s.ops == soakFingerprintOps {
				s.prefix = s.fingerprint.Sum64()
			}
			s.logf("op %d (t=%s): %s", s.ops, time.Now().Format("15:04:05.000"), line)
			return
		}
	}
}

func (s *soak) createService(ctx context.Context) string {
	m := s.model
	if len(m.svcs) >= soakMaxSvcs {
		return ""
	}
	m.svcSeq++
	sv := &soakSvc{ns: []string{"ns-a", "ns-b"}[m.rng.IntN(2)], name: fmt.Sprintf("svc-%d", m.svcSeq), lb: true,
		local: m.rng.IntN(3) == 0, annotated: m.rng.IntN(6) != 0}
	if m.rng.IntN(4) == 0 {
		sv.class, sv.annotated = soakClass, false
	}
	for range 1 + m.rng.IntN(3) {
		if p, ok := m.newPort(sv); ok {
			sv.ports = append(sv.ports, p)
		}
	}
	m.moveEndpoints(sv)
	if s.dual {
		m.drawFamilies(sv)
	}
	m.svcs = append(m.svcs, sv)
	err := s.apiCreate(ctx, sv)
	return "create " + sv.String() + errSuffix(err)
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (error: " + err.Error() + ")"
}

func (s *soak) apiCreate(ctx context.Context, sv *soakSvc) error {
	if _, err := s.client.DiscoveryV1().EndpointSlices(sv.ns).Create(ctx, sv.slice(), metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := s.client.CoreV1().Services(sv.ns).Create(ctx, sv.object(), metav1.CreateOptions{})
	return err
}

// apiUpdate writes sv's spec onto the Service as the API server has it.
func (s *soak) apiUpdate(ctx context.Context, sv *soakSvc) error {
	for range 5 {
		o, err := s.client.CoreV1().Services(sv.ns).Get(ctx, sv.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		sv.apply(o)
		if _, err = s.client.CoreV1().Services(sv.ns).Update(ctx, o, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			return err
		}
	}
	return errors.New("conflicts")
}

func (s *soak) deleteService(ctx context.Context) string {
	m := s.model
	if len(m.svcs) == 0 {
		return ""
	}
	i := m.rng.IntN(len(m.svcs))
	sv := m.svcs[i]
	m.svcs = slices.Delete(m.svcs, i, i+1)
	m.freeNodePorts(sv)
	var err error
	for range 5 {
		var o *v1.Service
		if o, err = s.client.CoreV1().Services(sv.ns).Get(ctx, sv.name, metav1.GetOptions{}); err != nil {
			break
		}
		o.DeletionTimestamp = ptr.To(metav1.Now())
		if _, err = s.client.CoreV1().Services(sv.ns).Update(ctx, o, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			break
		}
	}
	return "delete " + sv.ns + "/" + sv.name + errSuffix(err)
}

func (s *soak) changeService(ctx context.Context) string {
	m := s.model
	if len(m.svcs) == 0 {
		return ""
	}
	sv := m.svcs[m.rng.IntN(len(m.svcs))]
	var what string
	switch m.rng.IntN(9) {
	case 0, 1:
		p, ok := m.newPort(sv)
		if !ok || len(sv.ports) >= 4 {
			return ""
		}
		sv.ports = append(sv.ports, p)
		what = fmt.Sprintf("add port %s:%s/%d->%d", p.name, p.proto, p.port, p.nodePort)
	case 2:
		if len(sv.ports) < 2 {
			return ""
		}
		i := m.rng.IntN(len(sv.ports))
		what = "remove port " + sv.ports[i].name
		delete(m.nodePorts, sv.ports[i].nodePort)
		sv.ports = slices.Delete(sv.ports, i, i+1)
	case 3:
		if !sv.lb {
			return ""
		}
		i := m.rng.IntN(len(sv.ports))
		delete(m.nodePorts, sv.ports[i].nodePort)
		sv.ports[i].nodePort = m.allocNodePort()
		what = fmt.Sprintf("nodePort of %s -> %d", sv.ports[i].name, sv.ports[i].nodePort)
	case 4:
		i := m.rng.IntN(len(sv.ports))
		p := sv.ports[i]
		p.proto = map[v1.Protocol]v1.Protocol{v1.ProtocolTCP: v1.ProtocolUDP, v1.ProtocolUDP: v1.ProtocolTCP}[p.proto]
		if slices.ContainsFunc(sv.ports, func(q soakPort) bool { return q.proto == p.proto && q.port == p.port }) {
			return ""
		}
		sv.ports[i] = p
		what = fmt.Sprintf("protocol of %s -> %s", p.name, p.proto)
	case 5:
		sv.local = !sv.local
		what = fmt.Sprintf("externalTrafficPolicy Local=%t", sv.local)
	case 6:
		if sv.class != "" {
			return ""
		}
		sv.annotated = !sv.annotated
		what = fmt.Sprintf("opt-in annotation %t", sv.annotated)
	case 7, 8:
		// Type and class: the class of a LoadBalancer cannot change, so
		// it changes through ClusterIP.
		sv.lb = !sv.lb
		if sv.lb {
			sv.class = ""
			if m.rng.IntN(3) == 0 {
				sv.class = soakClass
			}
			for i := range sv.ports {
				sv.ports[i].nodePort = m.allocNodePort()
			}
		} else {
			sv.class = ""
			m.freeNodePorts(sv)
			for i := range sv.ports {
				sv.ports[i].nodePort = 0
			}
		}
		what = fmt.Sprintf("type LoadBalancer=%t class=%q", sv.lb, sv.class)
	}
	err := s.apiUpdate(ctx, sv)
	return "change " + sv.ns + "/" + sv.name + ": " + what + " => " + sv.String() + errSuffix(err)
}

func (s *soak) moveEndpoints(ctx context.Context) string {
	m := s.model
	if len(m.svcs) == 0 {
		return ""
	}
	sv := m.svcs[m.rng.IntN(len(m.svcs))]
	m.moveEndpoints(sv)
	_, err := s.client.DiscoveryV1().EndpointSlices(sv.ns).Update(ctx, sv.slice(), metav1.UpdateOptions{})
	return "endpoints move: " + sv.String() + errSuffix(err)
}

func (s *soak) changeNode(ctx context.Context) string {
	m := s.model
	nodes := s.client.CoreV1().Nodes()
	switch m.rng.IntN(5) {
	case 0: // add
		if len(m.nodes) >= min(soakMaxNode, m.slots) {
			return ""
		}
		used := map[int]bool{}
		for _, n := range m.nodes {
			used[n.slot] = true
		}
		slot := 0
		for used[slot] {
			slot++
		}
		n := &soakNode{name: fmt.Sprintf("node-%d", m.nodeSeq), slot: slot, ready: m.rng.IntN(4) != 0}
		m.nodeSeq++
		m.nodes = append(m.nodes, n)
		v6 := ""
		if s.dual {
			n.prefix = m.rng.IntN(3)
			v6 = " and " + s.describeGUA(n)
		}
		_, err := nodes.Create(ctx, s.nodeObject(n), metav1.CreateOptions{})
		return fmt.Sprintf("add node %s at %s%s ready=%t", n.name, s.world.nodeAddr(slot), v6, n.ready) + errSuffix(err)
	case 1: // remove (never the CCM's host)
		if len(m.nodes) < 2 {
			return ""
		}
		i := 1 + m.rng.IntN(len(m.nodes)-1)
		n := m.nodes[i]
		m.nodes = slices.Delete(m.nodes, i, i+1)
		err := nodes.Delete(ctx, n.name, metav1.DeleteOptions{})
		if s.nodeGone == nil {
			s.nodeGone = map[netip.Addr]time.Time{}
		}
		s.nodeGone[s.world.nodeAddr(n.slot)] = time.Now()
		return "remove node " + n.name + errSuffix(err)
	default: // readiness or the exclusion label (never the CCM's host)
		if len(m.nodes) < 2 {
			return ""
		}
		n := m.nodes[1+m.rng.IntN(len(m.nodes)-1)]
		what := ""
		if m.rng.IntN(4) == 0 {
			n.excluded = !n.excluded
			what = fmt.Sprintf("node %s excluded=%t", n.name, n.excluded)
		} else {
			n.ready = !n.ready
			what = fmt.Sprintf("node %s ready=%t", n.name, n.ready)
		}
		o, err := nodes.Get(ctx, n.name, metav1.GetOptions{})
		if err == nil {
			want := s.nodeObject(n)
			o.Status.Conditions, o.Labels = want.Status.Conditions, want.Labels
			_, err = nodes.Update(ctx, o, metav1.UpdateOptions{})
		}
		return what + errSuffix(err)
	}
}

// foreignTake has host (a LAN host, or the other cluster's node) map a port
// a Service of the soak may want.
func (s *soak) foreignTake(ctx context.Context, who string, desc string) string {
	m := s.model
	c := soakPorts[m.rng.IntN(len(soakPorts))]
	k := igd.Key{Protocol: igd.Protocol(c.proto), ExternalPort: uint16(c.port)}
	if _, ok := m.foreign[k]; ok {
		return ""
	}
	m.foreign[k] = who
	err := s.world.foreignAdd(ctx, who, k, desc)
	return fmt.Sprintf("fault: %s takes %s%s", who, k, errSuffix(err))
}

// foreignRelease has a LAN host or the other cluster give a port back.
func (s *soak) foreignRelease(ctx context.Context) string {
	m := s.model
	if len(m.foreign) == 0 {
		return ""
	}
	keys := slices.SortedFunc(func(yield func(igd.Key) bool) {
		for k := range m.foreign {
			if !yield(k) {
				return
			}
		}
	}, compareKeys)
	k := keys[m.rng.IntN(len(keys))]
	who := m.foreign[k]
	delete(m.foreign, k)
	err := s.world.foreignDelete(ctx, who, k)
	return fmt.Sprintf("fault: %s releases %s%s", who, k, errSuffix(err))
}

// restart kills the running CCM processes mid-operation and starts a fresh
// one.
func (s *soak) restart(ctx context.Context) string {
	for _, p := range s.procs {
		p.stop()
	}
	p, err := s.newProcess(ctx, nil)
	if err != nil {
		s.t.Fatalf("starting a CCM process: %v", err)
	}
	s.procs = []*soakProcess{p}
	return fmt.Sprintf("fault: the CCM is killed and process %d starts", p.id)
}

// handOver starts a second process beside the running one; both run for a
// moment (a fail-over overlap), then the first stops.
func (s *soak) handOver(ctx context.Context) string {
	p, err := s.newProcess(ctx, nil)
	if err != nil {
		s.t.Fatalf("starting a CCM process: %v", err)
	}
	overlap := time.Duration(200+s.model.rng.IntN(2000)) * time.Millisecond
	time.Sleep(overlap)
	for _, old := range s.procs {
		old.stop()
	}
	s.procs = []*soakProcess{p}
	return fmt.Sprintf("fault: leader hand-over to process %d after %s of overlap", p.id, overlap)
}

// quiet pauses the schedule: the armed faults end, the WAN is up, and the
// invariants must hold within bound.
func (s *soak) quiet(ctx context.Context, seed uint64) {
	s.world.calm()
	if !s.world.externalIP().IsValid() {
		s.model.wanSeq++
		a := netip.AddrFrom4([4]byte{198, 51, 101, byte(10 + s.model.wanSeq%200)})
		s.world.setWAN(ctx, a)
		s.logf("quiet: the WAN address comes back as %s", a)
	}
	began := time.Now()
	base, most := s.bound()
	deadline := began.Add(base)
	if s.mode == "pcp-only" && !s.wiped.IsZero() {
		if d := s.wiped.Add(soakLease + base); d.After(deadline) {
			deadline = d
		}
	}
	if s.dual && !s.wiped.IsZero() {
		// A pinhole the router lost that no probe finds (a PCP router
		// cannot be asked about one; through UPnP one is probed only by
		// a process holding no mapping, else a mapping it wrote before
		// the loss must be probed) is opened again at its renewal, due
		// within half a lease, at the next pass.
		if d := s.wiped.Add(soakLease/2 + soakRenew + base); d.After(deadline) {
			deadline = d
		}
	}
	var last, atBase []string // atBase: what did not hold once the base bound had passed
	for {
		s.reap(ctx)
		var leftToLease int
		last, leftToLease = s.check(ctx, began)
		if len(last) == 0 {
			d := time.Since(began)
			s.converge = append(s.converge, d)
			s.checks++
			s.logf("quiet point after op %d: converged in %s", s.ops, d.Round(time.Millisecond))
			for _, v := range atBase {
				s.logf("  waited past %s for: %s", base, v)
			}
			return
		}
		if atBase == nil && time.Since(began) > base {
			atBase = last
		}
		if d := time.Now().Add(base); leftToLease > 0 && d.After(deadline) {
			deadline = d
		}
		// A Service whose last sync failed waits for its controller's
		// retry (soakRetryMin to soakRetryMax later), then a bound.
		// A Service that fails at every retry would push this on for
		// ever: a retry due later than soakRetryMax after the quiet point
		// began is not waited for.
		retryBy := s.retries.latestDue(last).Add(base)
		if limit := began.Add(soakRetryMax + base); retryBy.After(limit) {
			retryBy = limit
		}
		if retryBy.After(deadline) {
			deadline = retryBy
		}
		if now := time.Now(); now.After(deadline) || (now.Sub(began) > most && now.After(retryBy)) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.checks++
	waited := time.Since(began).Round(time.Second)
	s.logf("quiet point after op %d: not converged in %s", s.ops, waited)
	for _, v := range last {
		s.violate("after op %d, %s after the quiet point: %s", s.ops, waited, v)
	}
	s.report(seed)
}

// watchForeign checks, every few milliseconds until stopped, that every
// mapping a LAN host or the other cluster holds is still there, unchanged.
func (s *soak) watchForeign() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if fw, ok := s.world.(interface{ checkForeign() }); ok {
				fw.checkForeign()
			}
		}
	}()
	return func() { cancel(); <-done }
}
