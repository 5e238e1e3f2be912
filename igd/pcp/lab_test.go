package pcp_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/internal/pcplab"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// Lab tests: the Backend and the Client against miniupnpd 2.3.1 in
// igdtest's namespaces (the wire-level ones are internal/pcpwire's). Each
// names the function of miniupnpd/pcpserver.c (tag miniupnpd_2_3_1) that
// explains what it pins.

// pcpClient is a PCP client acting from node i, talking to the router's LAN
// address.
func pcpClient(t *testing.T, lab *igdtest.Lab, i int) *pcp.Client {
	t.Helper()
	c, err := pcp.NewClient(pcp.Config(pcplab.Config(lab, i)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// desc is the description miniupnpd gives a mapping of nonce: three
// 32-bit words printed with %08x on the lab's little-endian machine (the
// conformance suite checks it with a nonce whose words are not
// palindromes).
func desc(nonce [12]byte) string { return fake.PCPDescription(nonce) }

// TestLabBackendMapped: Backend.Mapped asks miniupnpd whether it holds a
// mapping without changing it (a delete with a random nonce: DeletePCPMap
// refuses it, NOT_AUTHORIZED, while the mapping is there), and reports it
// gone after a reboot (NO_RESOURCES).
func TestLabBackendMapped(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2, PCPAllowThirdParty: true})
	ctx := pcplab.Context(t)
	b, err := pcp.NewBackend(pcp.BackendConfig{PCP: pcpClient(t, lab, 0), Secret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	m := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: lab.Nodes[1].Addr, InternalPort: 30080, Lease: time.Hour, Enabled: true}
	if _, err := b.AddFor(ctx, "default/web", m); err != nil {
		t.Fatalf("AddFor: %v\nminiupnpd log:\n%s", err, lab.Log())
	}
	for i := range 2 {
		if got, err := b.Mapped(ctx, igd.TCP, lab.Nodes[1].Addr, 30080); err != nil || !got {
			t.Errorf("Mapped %d while the mapping is there = %t, %v; want true", i, got, err)
		}
	}
	pcplab.WantMapping(t, ctx, pcplab.UPnPClient(t, lab, 0), m.Key(), netip.AddrPortFrom(lab.Nodes[1].Addr, 30080),
		desc(pcpwire.NonceFor([]byte("0123456789abcdef0123456789abcdef"), "default/web", m.Key())))
	lab.Reboot(t)
	if got, err := b.Mapped(ctx, igd.TCP, lab.Nodes[1].Addr, 30080); err != nil || got {
		t.Errorf("Mapped after the router rebooted = %t, %v; want false", got, err)
	}
}

// TestLabEpochLost: miniupnpd answers an ANNOUNCE request with its epoch
// (processPCPRequest, PCP_OPCODE_ANNOUNCE). This lab runs it with
// system_uptime=yes, so a reboot of the lab (a daemon restart) keeps the
// epoch counting and EpochLost reports no restart; the load balancer reads a
// mapping again instead when it has one.
func TestLabEpochLost(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 1, PCPAllowThirdParty: true})
	ctx := pcplab.Context(t)
	c := pcpClient(t, lab, 0)
	for i, what := range []string{"first, nothing heard before", "again, the server running", "after a reboot of the lab"} {
		if i == 2 {
			lab.Reboot(t)
		}
		if lost, err := c.EpochLost(ctx); err != nil || lost {
			t.Errorf("EpochLost %s = %t, %v; want false\nminiupnpd log:\n%s", what, lost, err, lab.Log())
		}
	}
}
