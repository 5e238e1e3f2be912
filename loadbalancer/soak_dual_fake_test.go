package loadbalancer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// The fake world's IPv6 side (-soak.families=dual): the router's
// WANIPv6FirewallControl served over HTTP on the IPv6 loopback, one Server
// per host (it sees every caller as that host's global address), and in the
// PCP modes a second PCP server on [::1] over the same Router, which opens
// pinholes for IPv6 MAPs. Pinholes live in the Router, so Reboot and wipe
// lose them.

// fakePinholes6 is the fake world's IPv6 side.
type fakePinholes6 struct {
	ccmURL string          // the Server that sees callers as node-0's global address (prefix 1)
	lanURL string          // the Server that sees callers as the LAN host
	pcp6   *fake.PCPServer // PCP modes
	closes []func()

	// planted are the other hosts' pinholes as the router listed them
	// when they were opened; guarded by fakeWorld.mu.
	planted []fake.OpenPinhole
}

// soakOtherSecret is the PCP secret of the other cluster.
var soakOtherSecret = []byte("other-cluster-secret-other-clust")

// startPinholes starts w's IPv6 side.
func (w *fakeWorld) startPinholes() error {
	p := &fakePinholes6{}
	w.v6 = p
	var err error
	if p.ccmURL, err = w.serveIPv6(soakGUA(0, 1)); err != nil {
		return err
	}
	if p.lanURL, err = w.serveIPv6(soakLANGUA); err != nil {
		return err
	}
	if w.pcp != nil {
		conn, err := net.ListenPacket("udp6", "[::1]:0")
		if err != nil {
			return fmt.Errorf("the dual-stack soak needs the IPv6 loopback: %w", err)
		}
		// Its minimum lifetime is below a pinhole's first lease (four
		// renewal intervals): a pinhole no status records, left by a
		// process that stopped, ends with that lease within the quiet
		// point's bound (soak.bound), as on a router whose min_lifetime
		// allows it; miniupnpd's default of 120 s would grant it longer.
		p.pcp6, err = fake.NewPCPServer(fake.PCPConfig{Router: w.router, Conn: conn, AllowThirdParty: true, MinLifetime: soakRenew, OnAnswer: w.onPCPAnswer})
		if err != nil {
			return err
		}
		p.closes = append(p.closes, func() { _ = p.pcp6.Close() })
	}
	return nil
}

// serveIPv6 serves the router over HTTP on [::1], seeing every caller as
// host, and returns its root description's URL.
func (w *fakeWorld) serveIPv6(host netip.Addr) (string, error) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		return "", fmt.Errorf("the dual-stack soak needs the IPv6 loopback: %w", err)
	}
	s := fake.NewServer(w.router, fake.ServerOptions{ClientAddr: func(*http.Request) netip.Addr { return host }})
	var logger klog.Logger
	if *soakKlog != "" { // each pinhole call in the processes' log, for a violation's cause
		logger = w.s.processLogger(0).WithValues("router", host)
	}
	// A lost reply is one the router acted on and never sent: the
	// connection closes without an answer (an answer, even a fault, would
	// be the router's word that it failed).
	h := http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		action := req.Header.Get("SOAPAction")
		_, write := pinholeAction(strings.Trim(action[strings.LastIndex(action, "#")+1:], `"`))
		lost := host == soakGUA(0, 1) && write && rec.Code == http.StatusOK && !w.planting.Load() && w.lose()
		if logger.GetSink() != nil && strings.Contains(action, "Pinhole") {
			logger.Info("Pinhole call", "action", action, "request", soapArgs(string(body)), "status", rec.Code, "answer", soapArgs(rec.Body.String()), "lost", lost)
		}
		if lost {
			if c, _, err := http.NewResponseController(rw).Hijack(); err == nil {
				c.Close()
				return
			}
		}
		maps.Copy(rw.Header(), rec.Header())
		rw.WriteHeader(rec.Code)
		_, _ = rw.Write(rec.Body.Bytes())
	})
	hs := httptest.NewUnstartedServer(h)
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	w.v6.closes = append(w.v6.closes, hs.Close, s.Close)
	return hs.URL + "/rootDesc.xml", nil
}

// upnpPinholeClient is a UPnP pinhole client of host through the Server at url.
func upnpPinholeClient(host netip.Addr, url string) (*pinhole.UPnPClient, error) {
	return pinhole.New(pinhole.Config{LocalAddr: host, RootDescURL: url, DialContext: fake.DialAs(host)})
}

func (w *fakeWorld) pinholeClient(t *testing.T) PinholeClient {
	if w.v6.pcp6 == nil {
		c, err := upnpPinholeClient(soakGUA(0, 1), w.v6.ccmURL)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c, err := pcp.NewClient(pcp.Config{Server: w.v6.pcp6.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	ph, err := pcp.NewPinholes(pcp.PinholesConfig{PCP: c, Secret: soakSecret})
	if err != nil {
		t.Fatal(err)
	}
	return ph
}

func (w *fakeWorld) pinholes(context.Context) ([]fake.OpenPinhole, error) {
	return w.router.Pinholes(), nil
}

// soakForeignLease is the lease of the other hosts' pinholes: longer than
// any soak of minutes.
const soakForeignLease = 24 * time.Hour

func (w *fakeWorld) plantPinholes(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.plantPinholesLocked(ctx)
}

// plantPinholesLocked opens the other hosts' pinholes and records them as
// the router lists them (ID, description). The caller holds w.mu.
func (w *fakeWorld) plantPinholesLocked(ctx context.Context) error {
	if w.v6 == nil {
		return nil
	}
	w.planting.Store(true)
	defer w.planting.Store(false)
	lan, err := upnpPinholeClient(soakLANGUA, w.v6.lanURL)
	if err != nil {
		return err
	}
	app, err := upnpPinholeClient(soakGUA(0, 1), w.v6.ccmURL)
	if err != nil {
		return err
	}
	want := []pinhole.Pinhole{
		{Protocol: igd.TCP, InternalClient: soakLANGUA, InternalPort: 8443, Lease: soakForeignLease},
		{Protocol: igd.TCP, InternalClient: soakGUA(0, 1), InternalPort: soakNodeAppPort, Lease: soakForeignLease},
	}
	if err := lan.OpenPinhole(ctx, want[0]); err != nil {
		return fmt.Errorf("the LAN host's pinhole: %w", err)
	}
	if err := app.OpenPinhole(ctx, want[1]); err != nil {
		return fmt.Errorf("node-0's app's pinhole: %w", err)
	}
	if w.v6.pcp6 != nil {
		c, err := pcp.NewClient(pcp.Config{Server: w.v6.pcp6.Addr()})
		if err != nil {
			return err
		}
		other, err := pcp.NewPinholes(pcp.PinholesConfig{PCP: c, Secret: soakOtherSecret})
		if err != nil {
			return err
		}
		p := pinhole.Pinhole{Protocol: igd.UDP, InternalClient: soakOtherGUA, InternalPort: 9000, Lease: soakForeignLease}
		if err := other.OpenPinhole(ctx, p); err != nil {
			return fmt.Errorf("the other cluster's pinhole: %w", err)
		}
		want = append(want, p)
	}
	w.v6.planted = nil
	for _, p := range w.router.Pinholes() {
		if slices.ContainsFunc(want, func(q pinhole.Pinhole) bool { return samePinhole(p.Pinhole, q) }) {
			w.v6.planted = append(w.v6.planted, p)
		}
	}
	if len(w.v6.planted) != len(want) {
		return fmt.Errorf("planted %d pinholes, the router lists %d of them", len(want), len(w.v6.planted))
	}
	return nil
}

// samePinhole reports whether a and b let the same traffic through (their
// leases aside).
func samePinhole(a, b pinhole.Pinhole) bool {
	return a.Protocol == b.Protocol && a.InternalClient == b.InternalClient && a.InternalPort == b.InternalPort
}

func (w *fakeWorld) foreignPinhole(p pinhole.Pinhole) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.v6 != nil && slices.ContainsFunc(w.v6.planted, func(q fake.OpenPinhole) bool { return samePinhole(p, q.Pinhole) })
}

// checkForeignPinholesLocked records a violation for each other host's
// pinhole that is gone or changed (another ID: closed and opened again;
// another description: renewed by someone else). The caller holds w.mu.
func (w *fakeWorld) checkForeignPinholesLocked() {
	if w.v6 == nil || len(w.v6.planted) == 0 {
		return
	}
	now := w.router.Pinholes()
	var still []fake.OpenPinhole // each reported once
	for _, want := range w.v6.planted {
		w.checked.Add(1)
		j := slices.IndexFunc(now, func(p fake.OpenPinhole) bool { return samePinhole(p.Pinhole, want.Pinhole) })
		switch {
		case j < 0:
			w.s.violateNow("another host's pinhole %s (ID %d, %q) is gone", want.Pinhole, want.ID, want.Description)
			continue
		case now[j].ID != want.ID || now[j].Description != want.Description:
			w.s.violateNow("another host's pinhole %s changed: ID %d %q, was ID %d %q", want.Pinhole, now[j].ID, now[j].Description, want.ID, want.Description)
			want = now[j]
		}
		still = append(still, want)
	}
	w.v6.planted = still
}

// pinholeAction reports whether a SOAP action is one of
// WANIPv6FirewallControl's, and whether it writes.
func pinholeAction(action string) (pinholes, write bool) {
	return strings.HasSuffix(action, "Pinhole") || action == "GetPinholePackets",
		action == "AddPinhole" || action == "UpdatePinhole" || action == "DeletePinhole"
}

func (w *fakeWorld) closePinholes() {
	if w.v6 == nil {
		return
	}
	for _, c := range slices.Backward(w.v6.closes) {
		c()
	}
}

var soapArg = regexp.MustCompile(`<(?:New)?(InternalPort|UniqueID|InternalClient|LeaseTime|errorCode)>([^<]*)<`)

// soapArgs is the arguments of a SOAP body that name a pinhole, for the log.
func soapArgs(body string) string {
	var out []string
	for _, m := range soapArg.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1]+"="+m[2])
	}
	return strings.Join(out, " ")
}
