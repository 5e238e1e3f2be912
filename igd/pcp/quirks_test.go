package pcp_test

// A quirk of miniupnpd 2.3.1 the client cannot prevent, pinned (see the
// package documentation).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp"
)

// When the router ignores PREFER_FAILURE it takes the next port that is
// free or already forwards to the same internal address and port, and
// replaces a mapping there whatever its nonce; Map's undo then deletes it.
// A LAN host's mapping on the next port to the node and nodePort is lost.
func TestBackendRefusedAddLosesTheNextPortsMappingToTheSameTarget(t *testing.T) {
	e := newBackendEnv(t, true)
	ctx := context.Background()
	held := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: lanHost, InternalPort: 8080,
		Description: "console", Lease: time.Hour, Enabled: true}
	if _, err := e.router.Client(lanHost).AddPortMapping(ctx, held); err != nil {
		t.Fatal(err)
	}
	next := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8081, InternalClient: nodeA, InternalPort: 30080,
		Description: "a LAN host's forward to the nodePort", Lease: time.Hour, Enabled: true}
	if _, err := e.router.Client(nodeA).AddPortMapping(ctx, next); err != nil {
		t.Fatal(err)
	}
	_, err := e.backend(t, backendSecret).AddFor(ctx, "c/default/web", igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080,
		InternalClient: nodeA, InternalPort: 30080, Lease: time.Hour, Enabled: true})
	if !errors.Is(err, pcp.ErrCannotProvideExternal) {
		t.Errorf("AddFor on a held key = %v, want pcp.ErrCannotProvideExternal", err)
	}
	if got, err := e.router.Client(nodeA).GetPortMapping(ctx, igd.TCP, 8081); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Errorf("the mapping on the next port after the refused AddFor: %+v, %v; the fake no longer replaces it as miniupnpd 2.3.1 does", got, err)
	}
}

// TestLabPreferFailureTakesTheNextPortsMapping is
// TestBackendRefusedAddLosesTheNextPortsMappingToTheSameTarget on
// miniupnpd 2.3.1: node 0's
// mapping on 8082 to its own port 30080 (made through UPnP) is replaced by
// a MAP for 8081 from node 0 to port 30080 with PREFER_FAILURE, where node
// 1 holds 8081, and Map's undo then deletes it.
func TestLabPreferFailureTakesTheNextPortsMapping(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	ctx := labContext(t)
	u1 := upnpClient(t, lab, 1)
	theirs := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8081, InternalClient: lab.Nodes[1].Addr, InternalPort: 30081, Description: "node 1's"}
	if _, err := u1.AddPortMapping(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	u0 := upnpClient(t, lab, 0)
	own := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8082, InternalClient: lab.Nodes[0].Addr, InternalPort: 30080, Description: "node 0's forward"}
	if _, err := u0.AddPortMapping(ctx, own); err != nil {
		t.Fatal(err)
	}
	_, err := pcpClient(t, lab, 0).Map(ctx, pcp.MapRequest{Protocol: igd.TCP, InternalPort: 30080, ExternalPort: 8081, Lifetime: time.Hour, PreferFailure: true, Nonce: nonceA})
	if !errors.Is(err, pcp.ErrCannotProvideExternal) {
		t.Errorf("Map with PreferFailure on a held port = %v, want ErrCannotProvideExternal", err)
	}
	if got, err := u1.GetPortMapping(ctx, igd.TCP, 8082); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Errorf("8082 after the refused Map: %+v, %v; want it gone (replaced, then undone), as miniupnpd 2.3.1 does", got, err)
	}
}
