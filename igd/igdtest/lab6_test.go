package igdtest_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ccmkit/ccmkit/igd/igdtest"
)

// unreachableWithin bounds a dial that is expected to fail: the router's
// firewall drops the SYN, so the dial only ends with this bound.
const unreachableWithin = 500 * time.Millisecond

// internetReaches tries addr from the internet host, bounded for a dial the
// firewall drops.
func internetReaches(ctx context.Context, lab *igdtest.Lab, addr netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(ctx, unreachableWithin)
	defer cancel()
	return lab.InternetReaches(ctx, addr)
}

// TestIPv6LabReachesTheNodeOnlyThroughAPinhole pins the IPv6 lab itself,
// with the upnpc peer client: the internet host cannot reach a node's
// listener on its global address until the node opens a pinhole, and
// cannot again once it is deleted.
func TestIPv6LabReachesTheNodeOnlyThroughAPinhole(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	n := lab.Nodes[0]
	require.NotNil(t, lab.IPv6)
	assert.Equal(t, "2001:db8:1::10", n.GUA.String())
	assert.Equal(t, "fd00:1::10", n.ULA.String())

	ln, err := n.Listen("tcp", netip.AddrPortFrom(n.GUA, 8443).String())
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	target := netip.AddrPortFrom(n.GUA, 8443)
	require.Error(t, internetReaches(ctx, lab, target), "the internet reaches the node with no pinhole")

	out, err := lab.ExecNode(ctx, 0, "upnpc", "-6", "-u", lab.IPv6.RootDescURL, "-A", "", "0", n.GUA.String(), "8443", "TCP", "3600")
	require.NoError(t, err)
	require.Contains(t, out, "Pinhole ID = ", "upnpc AddPinhole:\n%s\nminiupnpd log:\n%s", out, lab.Log())
	id := strings.TrimSpace(out[strings.LastIndex(out, "=")+1:])
	require.NoError(t, internetReaches(ctx, lab, target), "the internet does not reach the node through the pinhole")

	out, err = lab.ExecNode(ctx, 0, "upnpc", "-6", "-u", lab.IPv6.RootDescURL, "-D", id)
	require.NoError(t, err)
	require.Contains(t, out, "returned : 0", "upnpc DeletePinhole:\n%s", out)
	require.Error(t, internetReaches(ctx, lab, target), "the internet still reaches the node after the pinhole was deleted")

}
