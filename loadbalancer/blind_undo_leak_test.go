package loadbalancer

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/igd"
)

// Unfixed (see the report): miniupnpd (CHECK_PORTINUSE) maps a MAP with
// PREFER_FAILURE for a key another host holds on the next free port;
// pcp.Client.Map deletes it again. When that undo is lost (no answer), the
// mapping on the other port stays: nothing records it, and it forwards a
// port the Service never asked for to its node until its lease ends (an
// hour), also after the Service gets its own key.
func TestBlindLostUndoLeavesNoStrayPort(t *testing.T) {
	e, _, drop := lossyBlindEnv(t, Config{})
	ctx := context.Background()
	host := igd.Mapping{Protocol: igd.TCP, ExternalPort: 80, InternalClient: addrStranger, InternalPort: 8080, Description: "console", Lease: time.Hour, Enabled: true}
	if _, err := e.router.Client(addrStranger).AddPortMapping(ctx, host); err != nil {
		t.Fatal(err)
	}
	nodes := threeNodes()
	svc := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	dropDeletes.Store(true)
	drop.Store(true)
	defer dropDeletes.Store(false)
	if _, err := e.ensure(t, svc, nodes); !errors.Is(err, ErrPortInUse) {
		t.Logf("Ensure with the undo lost: %v", err)
	}
	drop.Store(false)
	dropDeletes.Store(false)
	if err := e.router.Client(addrStranger).DeletePortMapping(ctx, igd.TCP, 80); err != nil {
		t.Fatal(err)
	}
	e.mustEnsure(t, svc, nodes)
	for _, m := range e.router.Mappings() {
		if m.ExternalPort != 80 {
			t.Errorf("stray mapping %s -> %s:%d left by the lost undo; table %q", m.Key(), m.InternalClient, m.InternalPort, e.table())
		}
	}
}
