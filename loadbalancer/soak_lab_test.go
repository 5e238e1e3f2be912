package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp"
)

// labWorld is the soak on miniupnpd (igd/igdtest) in the mode's profile.
// Lab nodes 0-2 are the cluster's node slots, 3 the LAN host, 4 the other
// cluster's node. Faults the lab cannot make (the WAN address) are no-ops;
// lost and slow replies are made on the CCM's connections (the router has
// acted when its reply is dropped). Mappings of other owners are read back
// every half second.
type labWorld struct {
	s      *soak
	t      *testing.T
	lab    *igdtest.Lab
	reader igd.Client

	lost, slow atomic.Int64
	slowFor    atomic.Int64
	checked    atomic.Int64
	lastCheck  atomic.Int64 // unix nanoseconds

	// mu serialises the other owners' writes, reboots and wipes with the
	// watch of their mappings.
	mu      sync.Mutex
	foreign map[igd.Key]igd.Mapping
	clients map[string]igd.Client

	// rogue is a device on the LAN host that, while rogueOn, answers
	// every SSDP search as an IGD:2 claiming a public address; the CCM
	// discovers its router by SSDP and must never ask the rogue anything
	// (rogueHits: its HTTP requests).
	rogueOn   atomic.Bool
	rogueHits atomic.Int64
	rogueStop func()
}

const (
	labNodeSlots = 3
	labLANSlot   = 3
	labOtherSlot = 4
)

func startLabWorld(t *testing.T, s *soak) (*labWorld, error) {
	opts := igdtest.Options{}
	switch s.mode {
	case "igd1":
		opts.ForceIGDv1 = true
	case "secure":
		opts = igdtest.OpenWrtDefault()
	case "pcp", "pcp-only":
		opts.PCPAllowThirdParty = true
		opts.MinLifetime = soakLease
	}
	opts.Nodes = 5
	lab := igdtest.Start(t, opts)
	w := &labWorld{s: s, t: t, lab: lab, foreign: map[igd.Key]igd.Mapping{}, clients: map[string]igd.Client{}}
	var err error
	if w.reader, err = w.upnp(labLANSlot, false); err != nil {
		return nil, err
	}
	w.clients[soakLAN] = w.reader
	if w.clients[soakOther], err = w.upnp(labOtherSlot, false); err != nil {
		return nil, err
	}
	if err := w.startRogue(); err != nil {
		return nil, err
	}
	return w, nil
}

// rogueExternalIP is the public address the rogue device claims.
var rogueExternalIP = netip.MustParseAddr("198.51.101.66")

// startRogue starts the rogue device on the LAN host: a fake IGD:2 (its
// root description and SOAP control) on port 5000, and an SSDP responder.
func (w *labWorld) startRogue() error {
	host := w.lab.Nodes[labLANSlot]
	ln, err := host.Listen("tcp4", netip.AddrPortFrom(host.Addr, 5000).String())
	if err != nil {
		return err
	}
	igdSrv := fake.NewServer(fake.NewRouter(fake.RouterConfig{ExternalIP: rogueExternalIP}), fake.ServerOptions{})
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		w.rogueHits.Add(1)
		w.s.violateNow("the CCM asked the rogue LAN device %s (not the default gateway) for %s %s", host.Addr, req.Method, req.URL.Path)
		igdSrv.ServeHTTP(rw, req)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	var pc *net.UDPConn
	err = host.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		pc, err = net.ListenMulticastUDP("udp4", ifi, &net.UDPAddr{IP: net.IPv4(239, 255, 255, 250), Port: 1900})
		return err
	})
	if err != nil {
		srv.Close()
		igdSrv.Close()
		return fmt.Errorf("rogue SSDP responder: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFromUDP(buf)
			if err != nil {
				return
			}
			req := string(buf[:n])
			if !w.rogueOn.Load() || !strings.HasPrefix(req, "M-SEARCH") {
				continue
			}
			st := "urn:schemas-upnp-org:device:InternetGatewayDevice:2"
			for _, line := range strings.Split(req, "\r\n") {
				if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "ST") {
					st = strings.TrimSpace(v)
				}
			}
			answer := "HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=120\r\nEXT:\r\n" +
				"LOCATION: http://" + netip.AddrPortFrom(host.Addr, 5000).String() + "/rootDesc.xml\r\n" +
				"SERVER: Linux UPnP/1.1 MiniUPnPd/2.3.1\r\nST: " + st + "\r\nUSN: uuid:0badc0de-0000-4000-8000-000000000066::" + st + "\r\n\r\n"
			_, _ = pc.WriteToUDP([]byte(answer), from)
		}
	}()
	w.rogueStop = func() {
		pc.Close()
		<-done
		srv.Close()
		igdSrv.Close()
	}
	return nil
}

// rogue has the rogue device answer SSDP searches, or stop.
func (w *labWorld) rogue(on bool) string {
	w.rogueOn.Store(on)
	if on {
		return fmt.Sprintf("fault: a rogue LAN device (%s) answers SSDP as an IGD:2 with public address %s", w.lab.Nodes[labLANSlot].Addr, rogueExternalIP)
	}
	return "fault: the rogue LAN device stops answering SSDP"
}

// upnp is a UPnP client acting from lab node i, one connection per call;
// faulty: with the armed faults.
func (w *labWorld) upnp(i int, faulty bool) (igd.Client, error) {
	cfg := w.lab.ClientConfig(i)
	dial := cfg.DialContext
	if faulty {
		dial = w.faultyDial(dial)
	}
	cfg.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	return igd.NewClient(cfg)
}

// upnpDiscovering is upnp(i, true) discovering its router by SSDP.
func (w *labWorld) upnpDiscovering(i int) (igd.Client, error) {
	cfg := w.lab.ClientConfig(i)
	cfg.RootDescURL = ""
	cfg.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: w.faultyDial(cfg.DialContext), DisableKeepAlives: true}}
	return igd.NewClient(cfg)
}

// faultyDial wraps dial: a connection made while a fault is armed answers
// late, or has its reply dropped once it came (the router acted).
func (w *labWorld) faultyDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		fc := &faultyConn{Conn: c}
		if w.slow.Load() > 0 && w.slow.Add(-1) >= 0 {
			fc.delay = time.Duration(w.slowFor.Load())
		}
		fc.lose = w.lost.Load() > 0 && w.lost.Add(-1) >= 0
		return fc, nil
	}
}

// faultyConn delays its first read, or drops the reply it reads.
type faultyConn struct {
	net.Conn
	delay time.Duration
	lose  bool
}

func (c *faultyConn) Read(b []byte) (int, error) {
	if c.delay > 0 {
		time.Sleep(c.delay)
		c.delay = 0
	}
	if c.lose {
		_, _ = c.Conn.Read(b) // the router answered: it acted
		c.Conn.Close()
		return 0, errReplyLost
	}
	return c.Conn.Read(b)
}

func (w *labWorld) nodeAddr(i int) netip.Addr {
	if i < labNodeSlots {
		return w.lab.Nodes[i].Addr
	}
	// Slots past the lab's nodes: addresses no host has (their nodes
	// never receive traffic; the router maps to them all the same).
	return netip.AddrFrom4([4]byte{192, 168, 77, byte(100 + i)})
}

func (w *labWorld) maxNodes() int { return labNodeSlots }

// ccmClient discovers the router by SSDP, as edge-ccm does with no
// gateway.url: the rogue may answer too.
func (w *labWorld) ccmClient(t *testing.T) (igd.Client, Announcer) {
	upnp, err := w.upnpDiscovering(0)
	if err != nil {
		t.Fatal(err)
	}
	if w.s.mode != "pcp" && w.s.mode != "pcp-only" {
		return upnp, nil
	}
	n := w.lab.Nodes[0]
	c, err := pcp.NewClient(pcp.Config{Server: netip.AddrPortFrom(w.lab.RouterLAN, pcp.Port),
		DialContext: w.faultyDial(n.DialContext), ListenPacket: n.ListenPacket})
	if err != nil {
		t.Fatal(err)
	}
	cfg := pcp.BackendConfig{UPnP: upnp, PCP: c, Secret: soakSecret}
	if w.s.mode == "pcp-only" {
		cfg.UPnP = nil
	}
	b, err := pcp.NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, c
}

func (w *labWorld) table(ctx context.Context) ([]igd.Mapping, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return igd.ReadTable(ctx, w.reader)
}

func (w *labWorld) externalIP() netip.Addr { return w.lab.ExternalIP }

// replaceForeignLocked has the other owners map their ports again after the
// table was emptied; a port the CCM took meanwhile is theirs no longer.
func (w *labWorld) replaceForeignLocked(ctx context.Context) {
	for k, m := range w.foreign {
		who := soakLAN
		if m.InternalClient == w.lab.Nodes[labOtherSlot].Addr {
			who = soakOther
		}
		if err := w.mapLocked(ctx, who, m); err != nil {
			w.s.logf("  %s cannot map %s again after the wipe: %v", who, k, err)
			delete(w.foreign, k)
		}
	}
}

// mapLocked has who add m and reads it back: after an nft flush miniupnpd
// may answer an add as done without making it again.
func (w *labWorld) mapLocked(ctx context.Context, who string, m igd.Mapping) error {
	if _, err := w.clients[who].AddPortMapping(ctx, m); err != nil {
		return err
	}
	got, err := w.reader.GetPortMapping(ctx, m.Protocol, m.ExternalPort)
	if err != nil {
		return fmt.Errorf("reading it back: %w", err)
	}
	if got.InternalClient != m.InternalClient || got.Description != m.Description {
		return fmt.Errorf("reading it back: %s:%d %q", got.InternalClient, got.InternalPort, got.Description)
	}
	return nil
}

func (w *labWorld) reboot(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lab.Reboot(w.t)
	w.replaceForeignLocked(ctx)
}

// wipe empties the router's table as a router does: with the daemon
// stopped (Lab.Reboot). miniupnpd 2.3.1's nftables backend caches its rules
// and reloads them only after a write of its own: flushed behind the
// running daemon, it answers from the rules that were (a re-add of a
// mapping it still lists is taken as a renewal and not made, and reads
// back as made), until its next write reloads the table and such a
// mapping is found gone, a state no router reaches.
func (w *labWorld) wipe(ctx context.Context) {
	w.reboot(ctx)
}

func (w *labWorld) setWAN(context.Context, netip.Addr) bool { return false } // the lab's WAN address is fixed

func (w *labWorld) foreignAdd(ctx context.Context, who string, k igd.Key, desc string) error {
	slot := labLANSlot
	if who == soakOther {
		slot = labOtherSlot
	}
	m := igd.Mapping{Protocol: k.Protocol, ExternalPort: k.ExternalPort, InternalClient: w.lab.Nodes[slot].Addr,
		InternalPort: k.ExternalPort, Description: desc, Enabled: true}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.mapLocked(ctx, who, m); err != nil {
		return err
	}
	w.foreign[k] = m
	return nil
}

func (w *labWorld) foreignDelete(ctx context.Context, who string, k igd.Key) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	slot := labLANSlot
	if who == soakOther {
		slot = labOtherSlot
	}
	if m, ok := w.foreign[k]; !ok || m.InternalClient != w.lab.Nodes[slot].Addr {
		return nil
	}
	delete(w.foreign, k)
	return w.clients[who].DeletePortMapping(ctx, k.Protocol, k.ExternalPort)
}

func (w *labWorld) loseReplies(n int) { w.lost.Store(int64(n)) }

func (w *labWorld) slowReplies(n int, d time.Duration) {
	w.slowFor.Store(int64(d))
	w.slow.Store(int64(n))
}

func (w *labWorld) calm() {
	w.lost.Store(0)
	w.slow.Store(0)
}

func (w *labWorld) crashed() bool {
	pid := w.lab.PID()
	return pid <= 0 || syscall.Kill(pid, 0) != nil
}

func (w *labWorld) writesChecked() int { return int(w.checked.Load()) }

// checkForeign reads the other owners' mappings back, twice a second.
func (w *labWorld) checkForeign() {
	now := time.Now().UnixNano()
	if now-w.lastCheck.Load() < int64(500*time.Millisecond) {
		return
	}
	w.lastCheck.Store(now)
	w.mu.Lock()
	defer w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for k, want := range w.foreign {
		got, err := w.reader.GetPortMapping(ctx, k.Protocol, k.ExternalPort)
		w.checked.Add(1)
		switch {
		case errors.Is(err, igd.ErrNoSuchEntry):
			w.s.violateNow("%s's mapping at %s (to %s:%d %q) is gone", want.InternalClient, k, want.InternalClient, want.InternalPort, want.Description)
			delete(w.foreign, k)
		case err != nil:
			// Unreadable now (a reboot under way): next time.
		case got.InternalClient != want.InternalClient || got.InternalPort != want.InternalPort || got.Description != want.Description:
			w.s.violateNow("%s's mapping at %s was rewritten: %s:%d %q, was %s:%d %q", want.InternalClient, k, got.InternalClient, got.InternalPort, got.Description, want.InternalClient, want.InternalPort, want.Description)
			w.foreign[k] = got
		}
	}
}

func (w *labWorld) close() {
	if w.rogueStop != nil {
		w.rogueStop()
	}
}
