package loadbalancer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/internal/pcplab"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// labPCP is a PCP client acting from node i of lab; dials counts its
// requests (one socket per call).
func labPCP(t testing.TB, lab *igdtest.Lab, i int, dials *atomic.Int64) *pcp.Client {
	t.Helper()
	n := lab.Nodes[i]
	c, err := pcp.NewClient(pcp.Config{
		Server: netip.AddrPortFrom(lab.RouterLAN, pcp.Port),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials != nil {
				dials.Add(1)
			}
			return n.DialContext(ctx, network, addr)
		},
		ListenPacket: n.ListenPacket,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// labBackend is a pcp.Backend acting from node i, reading through upnp.
func labBackend(t testing.TB, upnp igd.Client, c *pcp.Client, secret []byte) *pcp.Backend {
	t.Helper()
	b, err := pcp.NewBackend(pcp.BackendConfig{UPnP: upnp, PCP: c, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLabServedThroughPCP: on miniupnpd with PCP and THIRD_PARTY on, a
// Service's port is mapped through PCP from the CCM's host (node 0) toward
// node 1, and answers from the internet. A LAN host's PCP delete with
// another nonce is refused; its UPnP delete is not (UPnP checks no nonce),
// and the next Ensure maps the port again. A second CCM of the cluster
// (same secret) renews and deletes the first one's mapping.
func TestLabServedThroughPCP(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2, PCPAllowThirdParty: true})
	ctx := labContext(t)
	lb, err := New(Config{Client: labBackend(t, pcplab.UPnPClient(t, lab, 0), labPCP(t, lab, 0, nil), pcpSecret)})
	if err != nil {
		t.Fatal(err)
	}
	nodes := labNodes(lab)[1:] // node 1 only: a target that is not the CCM's host
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080)))
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Fatal(err)
	}
	key := igd.Key{Protocol: igd.TCP, ExternalPort: 8080}
	nonce := pcpwire.NonceFor(pcpSecret, newOwner(testCluster, "default", "web").token, key)
	peer := pcplab.UPnPClient(t, lab, 1)
	m, err := peer.GetPortMapping(ctx, igd.TCP, 8080)
	if err != nil {
		t.Fatalf("the mapping, read by a peer: %v", err)
	}
	if want := pcpwire.Description(nonce, binary.LittleEndian); m.InternalClient != lab.Nodes[1].Addr || m.InternalPort != 30080 || m.Description != want {
		t.Fatalf("mapping = %v, want to %s:30080 described %q", m, lab.Nodes[1].Addr, want)
	}
	serveNodePort(t, lab, 1, 30080, "hello through PCP")
	if body, err := lab.InternetGet(ctx, fmt.Sprintf("http://%s:8080/", lab.ExternalIP)); err != nil || body != "hello through PCP" {
		t.Fatalf("GET from the internet = %q, %v", body, err)
	}

	// Node 1 (the mapping's own internal address) tries to delete it over
	// PCP with a nonce of its own: refused.
	var guess [12]byte
	copy(guess[:], "not the key!")
	if err := (*pcpwire.Client)(labPCP(t, lab, 1, nil)).Delete(ctx, igd.TCP, lab.Nodes[1].Addr, 30080, guess); !errors.Is(err, pcpwire.ErrNotAuthorized) {
		t.Errorf("a LAN host's PCP delete with another nonce = %v, want pcpwire.ErrNotAuthorized", err)
	}
	if _, err := peer.GetPortMapping(ctx, igd.TCP, 8080); err != nil {
		t.Fatalf("the mapping after the refused delete: %v", err)
	}
	// Over UPnP nothing checks the nonce.
	if out, err := lab.Upnpc(ctx, 1, "-d", "8080", "TCP"); err != nil {
		t.Fatalf("upnpc -d: %v\n%s", err, out)
	}
	if _, err := peer.GetPortMapping(ctx, igd.TCP, 8080); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Fatalf("the mapping after upnpc -d: %v, want gone (UPnP checks no nonce)", err)
	}
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Fatalf("Ensure after upnpc -d: %v", err)
	}

	// A second CCM of the cluster, on node 1, with the same secret.
	second, err := New(Config{Client: labBackend(t, peer, labPCP(t, lab, 1, nil), pcpSecret)})
	if err != nil {
		t.Fatal(err)
	}
	second.seeNodes(nodes)
	if _, err := second.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Fatalf("Ensure from the second CCM: %v", err)
	}
	if err := second.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted from the second CCM: %v", err)
	}
	if _, err := peer.GetPortMapping(ctx, igd.TCP, 8080); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Errorf("the mapping after the second CCM's delete: %v, want gone", err)
	}
}

// TestLabPCPWithoutThirdParty: where the router refuses THIRD_PARTY, a
// Service the rendezvous hash gives to another node is mapped to the CCM's
// own node through PCP, in the same Ensure, and the backend says so.
func TestLabPCPWithoutThirdParty(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	ctx := labContext(t)
	nodes := labNodes(lab)
	targets, _ := eligibleTargets(nodes)
	var svc *v1.Service
	for i := 0; svc == nil; i++ {
		name := fmt.Sprintf("web%d", i)
		if tgt, _ := chooseTarget(newOwner(testCluster, "default", name).key(), targets, nil); tgt.name == "node-b" {
			svc = newService("default", name, withPorts(port("http", v1.ProtocolTCP, 8080, 30080)))
		}
	}
	b := labBackend(t, pcplab.UPnPClient(t, lab, 0), labPCP(t, lab, 0, nil), pcpSecret)
	lb, err := New(Config{Client: b})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if !b.SelfOnly() {
		t.Error("the backend does not say the router maps to this host only")
	}
	m, err := pcplab.UPnPClient(t, lab, 1).GetPortMapping(ctx, igd.TCP, 8080)
	if err != nil || m.InternalClient != lab.Nodes[0].Addr || !strings.HasPrefix(m.Description, "PCP MAP ") {
		t.Fatalf("mapping = %v, %v; want a PCP mapping to node 0 (%s), the CCM's own", m, err, lab.Nodes[0].Addr)
	}
}

// BenchmarkLabPCPEnsureVsBareMaps compares, on one lab, a new 10-port
// Service served through PCP with ten bare PCP MAPs of the same ports
// (ensure/bare), and counts the router calls of a no-op Ensure
// (noop-calls; the Service has 10 ports): reads through UPnP (reads) and
// through a backend that never reads (blind).
func BenchmarkLabPCPEnsureVsBareMaps(b *testing.B) {
	b.Run("reads", func(b *testing.B) { benchPCPEnsure(b, false) })
	b.Run("blind", func(b *testing.B) { benchPCPEnsure(b, true) })
}

func benchPCPEnsure(b *testing.B, blind bool) {
	lab := igdtest.Start(b, igdtest.Options{Nodes: 2, PCPAllowThirdParty: true, Daemonize: true})
	ctx := context.Background()
	var dials atomic.Int64
	cc := newCounting(pcplab.UPnPClient(b, lab, 0))
	pc := labPCP(b, lab, 0, &dials)
	client := igd.Client(labBackend(b, cc, pc, pcpSecret))
	if blind {
		var err error
		if client, err = pcp.NewBackend(pcp.BackendConfig{PCP: pc, Secret: pcpSecret}); err != nil {
			b.Fatal(err)
		}
	}
	lb, err := New(Config{Client: client})
	if err != nil {
		b.Fatal(err)
	}
	nodes := labNodes(lab)[1:]
	var ports []v1.ServicePort
	for i := range 10 {
		ports = append(ports, port(fmt.Sprintf("p%d", i), v1.ProtocolTCP, int32(21000+i), int32(30000+i)))
	}
	var ensure, bare time.Duration
	noop := 0
	for i := range b.N {
		svc := newService("bench", fmt.Sprintf("s%d", i), withPorts(ports...))
		start := time.Now()
		if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
			b.Fatal(err)
		}
		ensure += time.Since(start)
		cc.take()
		before := dials.Load()
		if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
			b.Fatal(err)
		}
		for _, n := range cc.take() {
			noop += n
		}
		noop += int(dials.Load() - before)
		if err := lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		for j := range 10 {
			if _, err := (*pcpwire.Client)(pc).Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: lab.Nodes[1].Addr, InternalPort: uint16(30000 + j),
				ExternalPort: uint16(21000 + j), Lifetime: time.Hour, PreferFailure: true, Nonce: [12]byte{byte(i), byte(j)}}); err != nil {
				b.Fatal(err)
			}
		}
		bare += time.Since(start)
		for j := range 10 {
			if err := (*pcpwire.Client)(pc).Delete(ctx, igd.TCP, lab.Nodes[1].Addr, uint16(30000+j), [12]byte{byte(i), byte(j)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(ensure)/float64(bare), "ensure/bare")
	b.ReportMetric(float64(noop)/float64(b.N), "noop-calls")
}

// TestLabServedBlind: the same through a backend that never reads (PCP
// only; the lab's UPnP serves only the test's own checks): mapped toward
// node 1 and reachable from the internet; renewed by a fresh process after
// the target node left (its sweep deletes the old mapping), deleted by
// another fresh process, and repaired after an announced reboot.
func TestLabServedBlind(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 3, PCPAllowThirdParty: true})
	ctx := labContext(t)
	blind := func(i int) *LoadBalancer {
		b, err := pcp.NewBackend(pcp.BackendConfig{PCP: labPCP(t, lab, i, nil), Secret: pcpSecret})
		if err != nil {
			t.Fatal(err)
		}
		lb, err := New(Config{Client: b})
		if err != nil {
			t.Fatal(err)
		}
		return lb
	}
	all := labNodes(lab)
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080)))
	first := blind(0)
	st, err := first.EnsureLoadBalancer(ctx, testCluster, svc, all[1:2])
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Ingress) != 1 || st.Ingress[0].IP != lab.ExternalIP.String() {
		t.Errorf("status %+v, want %s", st, lab.ExternalIP)
	}
	svc.Status.LoadBalancer = *st
	peer := pcplab.UPnPClient(t, lab, 2)
	mappedTo := func(want netip.Addr) {
		t.Helper()
		m, err := peer.GetPortMapping(ctx, igd.TCP, 8080)
		if err != nil || m.InternalClient != want || !strings.HasPrefix(m.Description, "PCP MAP ") {
			t.Fatalf("mapping = %v, %v; want a PCP mapping to %s", m, err, want)
		}
	}
	mappedTo(lab.Nodes[1].Addr)
	serveNodePort(t, lab, 1, 30080, "hello, blind")
	if body, err := lab.InternetGet(ctx, fmt.Sprintf("http://%s:8080/", lab.ExternalIP)); err != nil || body != "hello, blind" {
		t.Fatalf("GET from the internet = %q, %v", body, err)
	}

	second := blind(2)
	second.seeNodes(all)
	if _, err := second.EnsureLoadBalancer(ctx, testCluster, svc, all[2:]); err != nil {
		t.Fatalf("Ensure from a fresh process toward node 2: %v", err)
	}
	mappedTo(lab.Nodes[2].Addr)

	third := blind(0)
	third.seeNodes(all)
	if _, exists, err := third.GetLoadBalancer(ctx, testCluster, svc); err != nil || !exists {
		t.Fatalf("GetLoadBalancer from a fresh process = %t, %v", exists, err)
	}
	if err := third.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.GetPortMapping(ctx, igd.TCP, 8080); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Errorf("after the delete: %v, want no mapping", err)
	}
}

// TestLabBlindFollowsANodePortChangeAndDeletesFromAFreshProcess: blind,
// on miniupnpd 2.3.1, a changed nodePort is re-pointed at once (the router
// refuses a MAP toward the key's node on another port), and, THIRD_PARTY
// allowed or refused, a fresh process deletes a Service (on a router that
// refuses THIRD_PARTY the sweep's deletes naming other nodes are refused
// with UNSUPP_OPTION, which does not fail the delete).
func TestLabBlindFollowsANodePortChangeAndDeletesFromAFreshProcess(t *testing.T) {
	for _, thirdParty := range []bool{true, false} {
		name := "thirdparty"
		if !thirdParty {
			name = "selfonly"
		}
		t.Run(name, func(t *testing.T) {
			lab := igdtest.Start(t, igdtest.Options{Nodes: 3, PCPAllowThirdParty: thirdParty})
			ctx := labContext(t)
			blind := func() *LoadBalancer {
				b, err := pcp.NewBackend(pcp.BackendConfig{PCP: labPCP(t, lab, 0, nil), Secret: pcpSecret})
				if err != nil {
					t.Fatal(err)
				}
				lb, err := New(Config{Client: b})
				if err != nil {
					t.Fatal(err)
				}
				return lb
			}
			all := labNodes(lab)
			peer := pcplab.UPnPClient(t, lab, 2)
			svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080)))
			first := blind()
			st, err := first.EnsureLoadBalancer(ctx, testCluster, svc, all)
			if err != nil {
				t.Fatal(err)
			}
			svc.Status.LoadBalancer = *st
			svc.Spec.Ports[0].NodePort = 30099
			if _, err := first.EnsureLoadBalancer(ctx, testCluster, svc, all); err != nil {
				t.Errorf("Ensure after the nodePort changed: %v", err)
			}
			if m, err := peer.GetPortMapping(ctx, igd.TCP, 8080); err != nil || m.InternalPort != 30099 || !strings.HasPrefix(m.Description, "PCP MAP ") {
				t.Errorf("mapping = %v, %v; want a PCP mapping to nodePort 30099", m, err)
			}
			fresh := blind()
			fresh.seeNodes(all)
			if err := fresh.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
				t.Errorf("EnsureLoadBalancerDeleted from a fresh process: %v", err)
			}
			if _, err := peer.GetPortMapping(ctx, igd.TCP, 8080); !errors.Is(err, igd.ErrNoSuchEntry) {
				t.Errorf("after the delete: %v, want no mapping", err)
			}
		})
	}
}

// TestLabPCPNodePortChanges: on miniupnpd 2.3.1 (nftables) a Service
// served through PCP follows a change of its nodePorts: one changed, two
// swapped. The router refuses a MAP at a key its mapping holds for another
// internal port, and refuses the PCP delete of a mapping whose node and
// nodePort another, newer mapping also targets (NOT_AUTHORIZED).
func TestLabPCPNodePortChanges(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2, PCPAllowThirdParty: true})
	ctx := labContext(t)
	lb, err := New(Config{Client: labBackend(t, pcplab.UPnPClient(t, lab, 0), labPCP(t, lab, 0, nil), pcpSecret)})
	if err != nil {
		t.Fatal(err)
	}
	nodes := labNodes(lab)[1:]
	peer := pcplab.UPnPClient(t, lab, 1)
	check := func(what string, want map[uint16]uint16) {
		t.Helper()
		for ext, np := range want {
			m, err := peer.GetPortMapping(ctx, igd.TCP, ext)
			if err != nil || m.InternalClient != lab.Nodes[1].Addr || m.InternalPort != np {
				t.Errorf("%s: TCP/%d = %v, %v; want to %s:%d", what, ext, m, err, lab.Nodes[1].Addr, np)
			}
		}
	}
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 8080, 30080), port("alt", v1.ProtocolTCP, 8081, 30081)))
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Fatal(err)
	}
	svc.Spec.Ports[0].NodePort = 30082
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Errorf("Ensure after a nodePort changed: %v", err)
	}
	check("after a nodePort changed", map[uint16]uint16{8080: 30082, 8081: 30081})
	svc.Spec.Ports[0].NodePort, svc.Spec.Ports[1].NodePort = 30081, 30082
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, svc, nodes); err != nil {
		t.Errorf("Ensure after two nodePorts swapped: %v", err)
	}
	check("after two nodePorts swapped", map[uint16]uint16{8080: 30081, 8081: 30082})
}
