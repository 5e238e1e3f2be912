package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cloud-provider/api"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/internal/pcplab"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// These tests run the LoadBalancer with the real igd client against a real
// miniupnpd (igdtest), acting from the lab's node namespaces. They need root,
// miniupnpd, upnpc, nft and ip; without them they skip, except when CI=true,
// where they fail.

// labNodes are Ready cluster nodes for the lab's node namespaces.
func labNodes(lab *igdtest.Lab) []*v1.Node {
	var out []*v1.Node
	for i, n := range lab.Nodes {
		out = append(out, newNode(fmt.Sprintf("node-%c", 'a'+i), n.Addr))
	}
	return out
}

func labContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// peerTable is the table as upnpc on node i lists it.
func peerTable(t *testing.T, ctx context.Context, lab *igdtest.Lab, i int) string {
	t.Helper()
	out, err := lab.Upnpc(ctx, i, "-l")
	if err != nil {
		t.Fatalf("upnpc -l: %v\n%s", err, out)
	}
	return out
}

// serveNodePort answers HTTP on node i's addr:nodePort with body.
func serveNodePort(t *testing.T, lab *igdtest.Lab, i int, nodePort int, body string) {
	t.Helper()
	l, err := lab.Nodes[i].Listen("tcp", netip.AddrPortFrom(lab.Nodes[i].Addr, uint16(nodePort)).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

func TestLabForeignMappingsSurviveAndDataPath(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	ctx := labContext(t)
	client := pcplab.UPnPClient(t, lab, 0)
	lb, err := New(Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	nodes := labNodes(lab)

	// A peer on node 1 maps 40000 with upnpc; another program on our own
	// host (node 0) maps 40001 under its own description.
	if out, err := lab.Upnpc(ctx, 1, "-e", "peer app", "-a", lab.Nodes[1].Addr.String(), "40000", "40000", "TCP"); err != nil {
		t.Fatalf("upnpc -a: %v\n%s", err, out)
	}
	if _, err := client.AddPortMapping(ctx, igd.Mapping{Protocol: igd.TCP, ExternalPort: 40001, InternalClient: lab.Nodes[0].Addr, InternalPort: 40001, Description: "other app on node-a", Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	foreign := func(t *testing.T, when string) {
		t.Helper()
		ms, err := igd.ReadTable(ctx, client)
		if err != nil {
			t.Fatal(err)
		}
		found := map[uint16]igd.Mapping{}
		for _, m := range ms {
			found[m.ExternalPort] = m
		}
		if m := found[40000]; m.InternalClient != lab.Nodes[1].Addr || m.Description != "peer app" {
			t.Errorf("%s: peer mapping 40000 = %v", when, m)
		}
		if m := found[40001]; m.InternalClient != lab.Nodes[0].Addr || m.Description != "other app on node-a" {
			t.Errorf("%s: own-host foreign mapping 40001 = %v", when, m)
		}
	}

	svc := newService("default", "web", withPorts(
		port("peer", v1.ProtocolTCP, 40000, 30000),
		port("local", v1.ProtocolTCP, 40001, 30001),
		port("http", v1.ProtocolTCP, 8080, 30080),
	))
	_, err = lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes)
	err = notForwarded(lb, svc, err) // the free port is served; the held ones say why
	if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), "peer app") || !strings.Contains(err.Error(), "other app on node-a") {
		t.Fatalf("Ensure error = %v; want ErrPortInUse naming both holders", err)
	}
	foreign(t, "after Ensure")

	// The free port converged: the data path from the internet reaches the
	// chosen node's nodePort.
	var target netip.Addr
	ms, err := igd.ReadTable(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ExternalPort == 8080 {
			target = m.InternalClient
			if m.Description != desc("default", "web", "http") || m.InternalPort != 30080 {
				t.Errorf("mapping 8080 = %v", m)
			}
		}
	}
	idx := -1
	for i, n := range lab.Nodes {
		if n.Addr == target {
			idx = i
		}
	}
	if idx < 0 {
		t.Fatalf("8080 not mapped to a node: %v\n%s", ms, peerTable(t, ctx, lab, 1))
	}
	serveNodePort(t, lab, idx, 30080, "hello from "+target.String())
	body, err := lab.InternetGet(ctx, fmt.Sprintf("http://%s:8080/", lab.ExternalIP))
	if err != nil || body != "hello from "+target.String() {
		t.Fatalf("GET from the internet = %q, %v", body, err)
	}
	// The peer sees our mapping, with our description intact.
	if tab := peerTable(t, ctx, lab, 1); !strings.Contains(tab, desc("default", "web", "http")) {
		t.Errorf("upnpc -l does not show our description:\n%s", tab)
	}

	// Update with fewer ports, then Delete: the foreign mappings stay.
	svc2 := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080)))
	if err := lb.UpdateLoadBalancer(ctx, testCluster, svc2, nodes); err != nil {
		t.Fatal(err)
	}
	foreign(t, "after Update")

	// The user restricts the sources: a mapping cannot, so the Service's
	// port closes (and nothing else changes); lifting it reopens it.
	restricted := svc2.DeepCopy()
	restricted.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"}
	if err := lb.UpdateLoadBalancer(ctx, testCluster, restricted, nodes); !errors.Is(err, ErrInvalidService) {
		t.Fatalf("Update with source ranges = %v; want ErrInvalidService", err)
	}
	foreign(t, "after the Service became invalid")
	if _, err := client.GetPortMapping(ctx, igd.TCP, 8080); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Errorf("mapping 8080 after the Service became invalid: %v; want none", err)
	}
	if _, err := lab.InternetGet(ctx, fmt.Sprintf("http://%s:8080/", lab.ExternalIP)); err == nil {
		t.Error("the port still answers from the internet after source ranges were set")
	}
	if err := lb.UpdateLoadBalancer(ctx, testCluster, svc2, nodes); err != nil {
		t.Fatal(err)
	}
	if _, exists, err := lb.GetLoadBalancer(ctx, testCluster, svc); err != nil || !exists {
		t.Fatalf("GetLoadBalancer = %v, %v", exists, err)
	}
	if err := lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Fatal(err)
	}
	foreign(t, "after Delete")
	if _, exists, err := lb.GetLoadBalancer(ctx, testCluster, svc); err != nil || exists {
		t.Fatalf("GetLoadBalancer after Delete = %v, %v", exists, err)
	}
	if _, err := lab.InternetGet(ctx, fmt.Sprintf("http://%s:8080/", lab.ExternalIP)); err == nil {
		t.Error("the port still answers from the internet after Delete")
	}
}

func TestLabRouterRefusesLowPort(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 1})
	ctx := labContext(t)
	lb, err := New(Config{Client: pcplab.UPnPClient(t, lab, 0)})
	if err != nil {
		t.Fatal(err)
	}
	svc := newService("default", "web", withPorts(port("low", v1.ProtocolTCP, 80, 30080), port("high", v1.ProtocolTCP, 8080, 30081)))
	st, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, labNodes(lab))
	if err != nil {
		t.Fatalf("Ensure = %v, want TCP/8080 served and TCP/80's refusal in the status", err)
	}
	if got := portErrors(st); got["TCP/80"] != PortErrorNotAuthorized || got["TCP/8080"] != "" {
		t.Errorf("port errors = %v, want TCP/80 %s and TCP/8080 none", got, PortErrorNotAuthorized)
	}
	err = notForwarded(lb, svc, nil)
	var pe *PortError
	if !errors.As(err, &pe) || pe.Key.ExternalPort != 80 || igd.Code(err) != upnp.CodeNotAuthorized {
		t.Fatalf("error = %v; want a PortError for TCP/80 with the router's 606", err)
	}
	t.Logf("router refused: %v", err)
}

func TestLabRebootRepairedByBackgroundWork(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	ctx := labContext(t)
	client := pcplab.UPnPClient(t, lab, 0)
	clk := clocktesting.NewFakeClock(time.Now())
	e := &env{clock: clk}
	lb, err := New(Config{Client: client, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	e.lb = lb
	nodes := labNodes(lab)
	objs := []k8sruntime.Object{nodes[0], nodes[1]}
	var want []string
	for i := range 3 {
		svc := lbService("default", fmt.Sprintf("s%d", i), withPorts(
			port("a", v1.ProtocolTCP, int32(41000+i), 30000),
			port("b", v1.ProtocolUDP, int32(42000+i), 30001),
		))
		if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, svc)
	}
	snapshot := func() []string {
		ms, err := igd.ReadTable(ctx, client)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			out = append(out, row(m.Protocol, m.ExternalPort, m.InternalClient, m.InternalPort, m.Description))
		}
		return out
	}
	want = snapshot()
	if len(want) != 6 {
		t.Fatalf("table = %v", want)
	}
	r := startBackground(t, e, objs...)

	lab.Reboot(t)
	if got := snapshot(); len(got) != 0 {
		t.Fatalf("reboot left %v", got)
	}
	// After the reboot a peer maps one of our ports before we are back: the
	// repair leaves it alone, and restores everything else.
	if out, err := lab.Upnpc(ctx, 1, "-e", "peer app", "-a", lab.Nodes[1].Addr.String(), "41001", "41001", "TCP"); err != nil {
		t.Fatalf("upnpc -a: %v\n%s", err, out)
	}
	var wantAfter []string
	for _, line := range want {
		if !strings.HasPrefix(line, "TCP/41001 ") {
			wantAfter = append(wantAfter, line)
		}
	}
	wantAfter = append(wantAfter, row(igd.TCP, 41001, lab.Nodes[1].Addr, 41001, "peer app"))
	// One probe interval, not a renewal interval, brings the rest back.
	passes := lb.passes.Load()
	r.clock.Step(lb.cfg.ProbeInterval)
	eventually(t, "the repair pass", func() bool { return lb.passes.Load() > passes })
	diffRows(t, "table after one probe interval", snapshot(), wantAfter)
}

func TestLabSecureMode(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2, SecureMode: true})
	ctx := labContext(t)
	nodes := labNodes(lab)

	t.Run("maps to its own node", func(t *testing.T) {
		lb, err := New(Config{Client: pcplab.UPnPClient(t, lab, 0), SecureMode: true, NodeName: "node-a"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			svc := newService("default", fmt.Sprintf("s%d", i), withPorts(port("p", v1.ProtocolTCP, int32(43000+i), 30080)))
			if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
				t.Fatalf("Ensure s%d: %v", i, err)
			}
		}
		ms, err := igd.ReadTable(ctx, pcplab.UPnPClient(t, lab, 0))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.InternalClient != lab.Nodes[0].Addr {
				t.Errorf("%v does not target node-a", m)
			}
		}
	})
	t.Run("finds its own node without a node name", func(t *testing.T) {
		// The process runs on node-b; nothing tells it so but its address
		// toward the router.
		lb, err := New(Config{Client: pcplab.UPnPClient(t, lab, 1), SecureMode: true})
		if err != nil {
			t.Fatal(err)
		}
		svc := newService("default", "self", withPorts(port("p", v1.ProtocolTCP, 43500, 30080)))
		if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
		m, err := pcplab.UPnPClient(t, lab, 0).GetPortMapping(ctx, igd.TCP, 43500)
		if err != nil || m.InternalClient != lab.Nodes[1].Addr {
			t.Fatalf("mapping = %v, %v; want one to node-b (%s)", m, err, lab.Nodes[1].Addr)
		}
		if err := lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("previous leader's mapping", func(t *testing.T) {
		// node-b was the leader: it mapped default/old to itself.
		if out, err := lab.Upnpc(ctx, 1, "-e", desc("default", "old", "http"), "-a", lab.Nodes[1].Addr.String(), "30080", "44000", "TCP", "120"); err != nil {
			t.Fatalf("upnpc -a: %v\n%s", err, out)
		}
		lb, err := New(Config{Client: pcplab.UPnPClient(t, lab, 0), SecureMode: true, NodeName: "node-a"})
		if err != nil {
			t.Fatal(err)
		}
		svc := newService("default", "old", withPorts(port("http", v1.ProtocolTCP, 44000, 30080)))
		_, err = lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes)
		var re *api.RetryError
		if !errors.As(err, &re) || igd.Code(err) != upnp.CodeNotAuthorized || re.RetryAfter() > 121*time.Second {
			t.Fatalf("error = %v; want a RetryError within the old lease, carrying the router's 606", err)
		}
		t.Logf("secure-mode fail-over: %v", err)
	})
}

// BenchmarkLabEnsureVsBareAdds compares, in the same run on a real
// miniupnpd, Ensure of a new 10-port Service with the 10 bare
// AddPortMapping calls that are all a blind implementation makes, and
// Delete of that Service with 10 bare DeletePortMapping calls. Delete is
// measured the way the service controller calls it (GetLoadBalancer, then
// EnsureLoadBalancerDeleted, which deletes from the Get's read: delete/bare
// and, with the Get, get+delete/bare) and called alone (it reads the table
// first: delete-alone/bare). It reports medians in milliseconds and the
// ratios (target: at most 1.1), delete-floor/bare: what even a single call
// made before the deletes costs, and rediscoveries: root description
// fetches after the first operation, counted in the router's log (target 0:
// discovery happens once per process).
//
// It runs on two labs: "quiet", the harness's default, and "console", with
// Options.ConsoleLog as the shared lab recipe runs miniupnpd, where every
// request pays for debug lines written to a 9600-baud console.
func BenchmarkLabEnsureVsBareAdds(b *testing.B) {
	for _, lc := range []struct {
		name    string
		console bool
	}{{"quiet", false}, {"console", true}} {
		b.Run(lc.name, func(b *testing.B) { benchEnsureVsBare(b, igdtest.Options{Nodes: 1, ConsoleLog: lc.console}) })
	}
}

func benchEnsureVsBare(b *testing.B, opts igdtest.Options) {
	lab := igdtest.Start(b, opts)
	ctx := context.Background()
	client := pcplab.UPnPClient(b, lab, 0)
	cc := newCounting(client)
	lb, err := New(Config{Client: cc})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := lb.refreshExternalIP(ctx); err != nil { // discovery, as after the first operation
		b.Fatal(err)
	}
	// Discovery (the root description fetch) happened once, above; no
	// operation below may repeat it.
	descFetches := func() int { return strings.Count(lab.Log(), "GET /rootDesc.xml") }
	fetchesBefore := descFetches()
	nodes := labNodes(lab)
	svc := benchService("lab", 10)
	// The bare calls write exactly the mappings Ensure writes (same keys,
	// target, descriptions and lease): the same work for the router, minus
	// the ownership check.
	mappings := make([]igd.Mapping, len(svc.Spec.Ports))
	o := newOwner(testCluster, svc.Namespace, svc.Name)
	for i, p := range svc.Spec.Ports {
		mappings[i] = igd.Mapping{Protocol: igd.TCP, ExternalPort: uint16(p.Port), InternalClient: lab.Nodes[0].Addr,
			InternalPort: uint16(p.NodePort), Description: o.description(p.Name), Lease: DefaultLease}
	}
	var bareAdd, ensure, bareDel, get, del, delAlone, listEmpty, listFull, oneCall []time.Duration
	ensureCalls, getCalls, delCalls, aloneCalls := tally{}, tally{}, tally{}, tally{}
	cc.take()
	timed := func(d *[]time.Duration, f func() error) {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*d = append(*d, time.Since(start))
	}
	bare := func() {
		timed(&listEmpty, func() error { _, err := igd.ReadTable(ctx, client); return err })
		timed(&bareAdd, func() error {
			for _, m := range mappings {
				if _, err := client.AddPortMapping(ctx, m); err != nil {
					return err
				}
			}
			return nil
		})
		timed(&listFull, func() error { _, err := igd.ReadTable(ctx, client); return err })
		// The cheapest call there is (the external IP), on the same
		// 10-mapping table: any ownership check made before the deletes
		// costs at least this much.
		timed(&oneCall, func() error { _, err := client.ExternalIP(ctx); return err })
		timed(&bareDel, func() error {
			for _, m := range mappings {
				if err := client.DeletePortMapping(ctx, m.Protocol, m.ExternalPort); err != nil {
					return err
				}
			}
			return nil
		})
	}
	// ensureSvc serves the Service, timing it into d.
	ensureSvc := func(d *[]time.Duration) {
		cc.take()
		timed(d, func() error { _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); return err })
		ensureCalls.add(cc.take())
	}
	// As the service controller deletes: Get, then Delete when it exists.
	controller := func() {
		ensureSvc(&ensure)
		timed(&get, func() error {
			_, exists, err := lb.GetLoadBalancer(ctx, testCluster, svc)
			if err == nil && !exists {
				err = errors.New("GetLoadBalancer: the Service's mappings are not there")
			}
			return err
		})
		getCalls.add(cc.take())
		timed(&del, func() error { return lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc) })
		delCalls.add(cc.take())
	}
	alone := func() {
		var untimed []time.Duration
		ensureSvc(&untimed)
		timed(&delAlone, func() error { return lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc) })
		aloneCalls.add(cc.take())
	}
	b.ResetTimer()
	for i := range b.N {
		// Rotate which goes first, so that none pays for the router's
		// state another left.
		steps := []func(){bare, controller, alone}
		for j := range steps {
			steps[(i+j)%len(steps)]()
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	ratio := func(a, b time.Duration) float64 { return float64(a) / float64(b) }
	b.ReportMetric(ms(median(bareAdd)), "bare-add-ms")
	b.ReportMetric(ms(median(ensure)), "ensure-ms")
	b.ReportMetric(ratio(median(ensure), median(bareAdd)), "ensure/bare")
	b.ReportMetric(ms(median(bareDel)), "bare-delete-ms")
	b.ReportMetric(ms(median(get)), "get-ms")
	b.ReportMetric(ms(median(del)), "delete-ms")
	b.ReportMetric(ratio(median(del), median(bareDel)), "delete/bare")
	b.ReportMetric(ratio(median(get)+median(del), median(bareDel)), "get+delete/bare")
	b.ReportMetric(ms(median(delAlone)), "delete-alone-ms")
	b.ReportMetric(ratio(median(delAlone), median(bareDel)), "delete-alone/bare")
	// The table read alone: empty (as in Ensure of a new Service) and with
	// the Service's 10 mappings (as in a Delete).
	b.ReportMetric(ms(median(listEmpty)), "read-empty-ms")
	b.ReportMetric(ms(median(listFull)), "read-10-ms")
	b.ReportMetric(ms(median(oneCall)), "call-10-ms")
	b.ReportMetric(ratio(median(bareDel)+median(oneCall), median(bareDel)), "delete-floor/bare")
	n := float64(b.N)
	b.ReportMetric(float64(ensureCalls[fake.MethodAddPortMapping])/n/2, "ensure-adds/op")
	b.ReportMetric(float64(ensureCalls[fake.MethodListPortMappings])/n/2, "ensure-reads/op")
	b.ReportMetric(float64(getCalls[fake.MethodListPortMappings])/n, "get-reads/op")
	b.ReportMetric(float64(delCalls[fake.MethodListPortMappings])/n, "delete-reads/op")
	b.ReportMetric(float64(delCalls[fake.MethodDeletePortMapping])/n, "delete-deletes/op")
	b.ReportMetric(float64(aloneCalls[fake.MethodListPortMappings])/n, "delete-alone-reads/op")
	b.ReportMetric(float64(descFetches()-fetchesBefore), "rediscoveries")
}

// BenchmarkLabRepairAfterReboot: one background pass after a real router
// reboot wiped 10 Services x 3 ports (target: 30 adds + 1 table read).
func BenchmarkLabRepairAfterReboot(b *testing.B) {
	lab := igdtest.Start(b, igdtest.Options{Nodes: 1})
	ctx := context.Background()
	cc := newCounting(pcplab.UPnPClient(b, lab, 0))
	lb, err := New(Config{Client: cc})
	if err != nil {
		b.Fatal(err)
	}
	nodes := labNodes(lab)
	svcs := ensureRebootServices(b, lb, nodes, 20000)
	w := staticWatch(b, nodes, svcs)
	var durs []time.Duration
	t := tally{}
	cc.take()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		lab.Reboot(b)
		cc.take()
		b.StartTimer()
		start := time.Now()
		lb.pass(ctx, w)
		durs = append(durs, time.Since(start))
		t.add(cc.take())
	}
	b.StopTimer()
	b.ReportMetric(float64(median(durs))/float64(time.Millisecond), "median-ms")
	t.report(b)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// TestLabRenamedPortRelabels renames a Service port on miniupnpd, which keeps
// the description of a mapping re-added with the same internal client and
// port: the new description must reach the router in one Ensure, and the
// next Ensure must make no writes.
func TestLabRenamedPortRelabels(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 1})
	ctx := labContext(t)
	client := newCounting(pcplab.UPnPClient(t, lab, 0))
	lb, err := New(Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	nodes := labNodes(lab)
	mapping := func(t *testing.T) igd.Mapping {
		t.Helper()
		m, err := client.Client.GetPortMapping(ctx, igd.TCP, 44080)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ensure := func(t *testing.T, portName string) {
		t.Helper()
		svc := newService("default", "web", withPorts(port(portName, v1.ProtocolTCP, 44080, 30080)))
		if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
			t.Fatal(err)
		}
	}

	ensure(t, "http")
	if m := mapping(t); m.Description != desc("default", "web", "http") {
		t.Fatalf("mapping = %v", m)
	}
	client.take()

	ensure(t, "web")
	if m := mapping(t); m.Description != desc("default", "web", "web") || m.InternalClient != lab.Nodes[0].Addr || m.InternalPort != 30080 {
		t.Errorf("mapping after rename = %v, want description %q", m, desc("default", "web", "web"))
	}
	if c := client.take(); c[fake.MethodAddPortMapping] != 1 || c[fake.MethodDeletePortMapping] != 1 {
		t.Errorf("rename: router calls = %v, want 1 delete, 1 add", c)
	}
	ensure(t, "web")
	if c := client.take(); len(c) != 2 || c[fake.MethodExternalIP] != 1 || c[fake.MethodListPortMappings] != 1 {
		t.Errorf("Ensure after rename: router calls = %v, want exactly 1 list and the external IP", c)
	}
	if tab := peerTable(t, ctx, lab, 0); !strings.Contains(tab, desc("default", "web", "web")) {
		t.Errorf("upnpc -l does not show the new description:\n%s", tab)
	}
}
