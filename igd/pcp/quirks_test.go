package pcp_test

// A quirk of miniupnpd 2.3.1 the client cannot prevent, pinned (see the
// package documentation).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
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
	if !errors.Is(err, pcpwire.ErrCannotProvideExternal) {
		t.Errorf("AddFor on a held key = %v, want pcpwire.ErrCannotProvideExternal", err)
	}
	if got, err := e.router.Client(nodeA).GetPortMapping(ctx, igd.TCP, 8081); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Errorf("the mapping on the next port after the refused AddFor: %+v, %v; the fake no longer replaces it as miniupnpd 2.3.1 does", got, err)
	}
}
