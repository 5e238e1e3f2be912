package loadbalancer

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ccmkit/ccmkit/igd"
)

// A blind (pcp-only) soak leaves to its lease what it cannot find, and its
// quiet point waits one soakLease for it (soak.bound): the fake's PCP
// server must grant that lease, as the lab's miniupnpd does (min_lifetime
// set to soakLease), and not miniupnpd's default minimum of 120 s, or such
// a mapping outlives the wait.
func TestSoakFakeWorldGrantsPCPMappingsTheSoakLease(t *testing.T) {
	s := &soak{t: t, mode: "pcp-only"}
	w, err := newFakeWorld(t, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	c, _ := w.ccmClient(t)
	g, ok := c.(igd.GuardedClient)
	if !ok {
		t.Fatalf("the pcp-only client %T is not an igd.GuardedClient", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := igd.Mapping{Protocol: igd.TCP, ExternalPort: 9001, InternalClient: fakeNodeAddr(3), InternalPort: 30014, Lease: soakLease, Enabled: true}
	got, err := g.AddFor(ctx, "ns-b/svc-5", m)
	if err != nil {
		t.Fatalf("AddFor(%s): %v", m.Key(), err)
	}
	if diff := cmp.Diff(soakLease, got.Lease); diff != "" {
		t.Errorf("lease granted by the fake's PCP server (-want +got):\n%s", diff)
	}
	for _, r := range w.router.Mappings() {
		if r.Key() == m.Key() && r.Lease > soakLease {
			t.Errorf("the router's table holds %s with %s left, more than the soak's lease %s", r.Key(), r.Lease, soakLease)
		}
	}
}
