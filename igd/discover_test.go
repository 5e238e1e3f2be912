package igd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/ccmkit/ccmkit/internal/upnp"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ssdpDevice is a test IGD that also answers SSDP searches from its own
// address, after delay.
type ssdpDevice struct {
	*testIGD
	pc    net.PacketConn
	delay time.Duration
	// locations are the LOCATIONs it answers each search with, one answer
	// each; none = one answer with the IGD's URL. Guarded by testIGD.mu.
	locations []string
	// pad is how many bytes of body each answer carries after its header.
	// Guarded by testIGD.mu.
	pad int
}

// SetAnswers makes d answer each search with one answer per location (none:
// its own URL), each carrying pad bytes of body.
func (d *ssdpDevice) SetAnswers(locations []string, pad int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.locations, d.pad = locations, pad
}

func newSSDPDevice(t *testing.T, dev device, ip string, delay time.Duration) *ssdpDevice {
	t.Helper()
	return newSSDPDeviceAt(t, dev, ip, delay, "")
}

// newSSDPDeviceAt is newSSDPDevice answering with location instead of its
// own URL.
func newSSDPDeviceAt(t *testing.T, dev device, ip string, delay time.Duration, location string) *ssdpDevice {
	t.Helper()

	g := newTestIGD(t, dev, ip+":0")
	pc, err := net.ListenPacket("udp4", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	d := &ssdpDevice{testIGD: g, pc: pc, delay: delay}
	if location != "" {
		d.locations = []string{location}
	}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(buf[:n])))
			if err != nil || req.Method != "M-SEARCH" || req.Header.Get("Man") != `"ssdp:discover"` {
				continue
			}
			st := req.Header.Get("St")
			if !strings.HasPrefix(st, "urn:schemas-upnp-org:service:") {
				continue
			}
			d.mu.Lock()
			locs, pad := d.locations, d.pad
			d.mu.Unlock()
			if len(locs) == 0 {
				locs = []string{g.URL}
			}
			for _, loc := range locs {
				answer := fmt.Sprintf("HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=120\r\nST: %s\r\nUSN: uuid:test::%s\r\nEXT:\r\nSERVER: test UPnP/1.1 MiniUPnPd/2.3.1\r\nLOCATION: %s\r\n\r\n%s", st, st, loc, strings.Repeat("x", pad))
				time.AfterFunc(d.delay, func() { pc.WriteTo([]byte(answer), from) })
			}
		}
	}()
	return d
}

// ssdpNet is an injectable ListenPacket: searches sent to the SSDP group go
// to every device's responder instead, over loopback.
type ssdpNet struct {
	t       *testing.T
	devices []*ssdpDevice

	mu       sync.Mutex
	searches []string
	conns    []*redirectConn
}

func (n *ssdpNet) ListenPacket(ctx context.Context, network, addr string) (net.PacketConn, error) {
	if network != "udp4" || addr != "0.0.0.0:0" {
		n.t.Errorf("ListenPacket(%q, %q), want udp4 0.0.0.0:0", network, addr)
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rc := &redirectConn{PacketConn: pc, net: n, readDone: make(chan struct{})}
	n.mu.Lock()
	n.conns = append(n.conns, rc)
	n.mu.Unlock()
	return rc, nil
}

func (n *ssdpNet) Searches() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.searches...)
}

type redirectConn struct {
	net.PacketConn
	net      *ssdpNet
	once     sync.Once
	readDone chan struct{} // closed when a ReadFrom returned an error
}

func (c *redirectConn) WriteTo(b []byte, to net.Addr) (int, error) {
	if to.String() != ssdpGroup {
		c.net.t.Errorf("search sent to %s, want %s", to, ssdpGroup)
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if err == nil {
		c.net.mu.Lock()
		c.net.searches = append(c.net.searches, req.Header.Get("St"))
		c.net.mu.Unlock()
	}
	for _, d := range c.net.devices {
		if _, err := c.PacketConn.WriteTo(b, d.pc.LocalAddr()); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

func (c *redirectConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, from, err := c.PacketConn.ReadFrom(b)
	if err != nil {
		c.once.Do(func() { close(c.readDone) })
	}
	return n, from, err
}

func newSSDPClient(t *testing.T, n *ssdpNet, gw netip.Addr) *UPnPClient {
	t.Helper()
	c, err := NewClient(Config{
		ListenPacket: n.ListenPacket,
		// Long bounds: the tests prove discovery returns once a usable
		// router answered, without waiting for them.
		DiscoveryTimeout: time.Minute,
		SettleTime:       500 * time.Millisecond, // generous: the race detector on a loaded machine is slow
		CallTimeout:      5 * time.Second,
		Host:             fakeHost{gw: gw},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSSDPDiscoverySearchesEveryServiceType(t *testing.T) {
	for _, dev := range devices {
		t.Run(shortService(dev.serviceType), func(t *testing.T) {
			d := newSSDPDevice(t, dev, "127.0.0.1", 0)
			n := &ssdpNet{t: t, devices: []*ssdpDevice{d}}
			c := newSSDPClient(t, n, netip.MustParseAddr("127.0.0.1"))
			gw, err := c.Discover(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if gw.ServiceType != dev.serviceType || gw.Location != d.URL {
				t.Errorf("discovered %s at %s, want %s at %s", gw.ServiceType, gw.Location, dev.serviceType, d.URL)
			}
			searched := n.Searches()
			for _, st := range serviceTypes {
				if !strings.Contains(strings.Join(searched, " "), st) {
					t.Errorf("no search for %s (searched %v)", st, searched)
				}
			}
			// Three answers (one per search) name one location: one fetch.
			if f := d.DescFetches(); f != 1 {
				t.Errorf("description fetched %d times, want 1", f)
			}
			// The reader goroutine exited: its socket was closed and read.
			assertReadersDone(t, n)
		})
	}
}

// The default gateway may offer several services (several devices, on as
// many ports): discovery ranks them. Hosts other than the gateway are never
// candidates (TestSSDPDiscoveryNeverChoosesAHostOtherThanTheGateway).
func TestSSDPDiscoveryChooses(t *testing.T) {
	const gwIP = "127.0.0.3"
	type spec struct {
		dev    device
		delay  time.Duration
		status string
		extIP  string
	}
	tests := []struct {
		name    string
		devices []spec
		want    int // index of the chosen device
		reason  string
	}{
		{"public beats private even when it answers last", []spec{
			{igd2Device, 0, "Connected", "10.0.0.2"},
			{igd1Device, 30 * time.Millisecond, "Connected", "198.51.101.7"},
		}, 1, "public external IP"},
		{"connected beats unknown status", []spec{
			{igd2Device, 0, "", "198.51.101.7"},
			{pppDevice, 20 * time.Millisecond, "Connected", "198.51.101.8"},
		}, 1, "connected"},
		{"newer service type breaks the tie", []spec{
			{igd1Device, 0, "Connected", "198.51.101.7"},
			{igd2Device, 30 * time.Millisecond, "Connected", "198.51.101.8"},
		}, 1, "WANIPConnection:2"},
		{"disconnected service is never chosen", []spec{
			{igd2Device, 0, "Disconnected", "198.51.101.7"},
			{igd1Device, 20 * time.Millisecond, "Connected", "192.168.0.2"},
		}, 1, "external IP not public"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &ssdpNet{t: t}
			for _, s := range tt.devices {
				d := newSSDPDevice(t, s.dev, gwIP, s.delay)
				if s.status == "" {
					d.handle("GetStatusInfo", fault(upnp.CodeInvalidAction))
				} else {
					d.handle("GetStatusInfo", reply("NewConnectionStatus", s.status, "NewLastConnectionError", "", "NewUptime", "1"))
				}
				d.handle("GetExternalIPAddress", reply("NewExternalIPAddress", s.extIP))
				n.devices = append(n.devices, d)
			}
			c := newSSDPClient(t, n, netip.MustParseAddr(gwIP))
			gw, err := c.Discover(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if want := n.devices[tt.want].URL; gw.Location != want {
				t.Errorf("chose %s (%s), want %s", gw.Location, gw.Reason, want)
			}
			if !strings.Contains(gw.Reason, tt.reason) || !strings.Contains(gw.Reason, "the default gateway "+gwIP+"; best of") {
				t.Errorf("Reason = %q, want it to say %q", gw.Reason, tt.reason)
			}
			if len(gw.Candidates) != len(tt.devices) {
				t.Errorf("Candidates = %v, want %d", gw.Candidates, len(tt.devices))
			}
		})
	}
}

// The default gateway answers with a service nothing can beat (connected,
// public, WANIPConnection:2): discovery takes it without waiting out the
// settle window, here an hour, for the other router's answer. A gateway
// offering less (IGD:1) is still weighed against every answer in the
// window (TestSSDPDiscoveryChooses).
func TestSSDPDiscoveryStopsAtTheGatewaysBestAnswer(t *testing.T) {
	const gwIP = "127.0.0.3"
	n := &ssdpNet{t: t}
	for _, ip := range []string{gwIP, "127.0.0.2"} {
		d := newSSDPDevice(t, igd2Device, ip, 0)
		d.handle("GetStatusInfo", reply("NewConnectionStatus", "Connected", "NewLastConnectionError", "", "NewUptime", "1"))
		d.handle("GetExternalIPAddress", reply("NewExternalIPAddress", "198.51.101.7"))
		n.devices = append(n.devices, d)
	}
	c, err := NewClient(Config{
		ListenPacket:     n.ListenPacket,
		DiscoveryTimeout: time.Hour,
		SettleTime:       time.Hour,
		Host:             fakeHost{gw: netip.MustParseAddr(gwIP)},
	})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := c.Discover(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if gw.Addr != netip.MustParseAddr(gwIP) || !strings.Contains(gw.Reason, "did not wait") {
		t.Errorf("chose %s (%s), want %s without waiting", gw.Addr, gw.Reason, gwIP)
	}
	assertReadersDone(t, n)
}

func TestSSDPDiscoveryNoneQualifies(t *testing.T) {
	const gwIP = "127.0.0.2"
	elsewhere := newTestIGD(t, igd2Device, "127.0.0.4:0")
	d1 := newSSDPDevice(t, igd2Device, gwIP, 0)
	d1.handle("GetStatusInfo", reply("NewConnectionStatus", "Disconnected", "NewLastConnectionError", "", "NewUptime", "0"))
	d2 := newSSDPDeviceAt(t, igd1Device, gwIP, 0, elsewhere.URL) // points away from its own address
	n := &ssdpNet{t: t, devices: []*ssdpDevice{d1, d2}}
	c, err := NewClient(Config{
		ListenPacket:     n.ListenPacket,
		DiscoveryTimeout: time.Second,
		Host:             fakeHost{gw: netip.MustParseAddr(gwIP)},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Discover(testCtx(t))
	var nge *noGatewayError
	if !errors.Is(err, ErrNoGateway) || !errors.As(err, &nge) {
		t.Fatalf("Discover() = %v, want a noGatewayError", err)
	}
	text := err.Error()
	for _, want := range []string{`WAN connection is "Disconnected"`, "not on the answering host " + gwIP, "found 2"} {
		if !strings.Contains(text, want) {
			t.Errorf("error %q does not say %q", text, want)
		}
	}
	if elsewhere.DescFetches() != 0 {
		t.Error("followed a LOCATION that pointed away from the answering host")
	}
}

func TestSSDPDiscoveryNoAnswer(t *testing.T) {
	n := &ssdpNet{t: t}
	c, err := NewClient(Config{ListenPacket: n.ListenPacket, DiscoveryTimeout: 200 * time.Millisecond, Host: fakeHost{}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Discover(testCtx(t))
	if !errors.Is(err, ErrNoGateway) || !strings.Contains(err.Error(), "no device answered") {
		t.Fatalf("Discover() = %v, want ErrNoGateway saying no device answered", err)
	}

	// The caller's own deadline ends discovery too, and shows in the error.
	ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	c2, _ := NewClient(Config{ListenPacket: n.ListenPacket, DiscoveryTimeout: time.Minute, Host: fakeHost{}})
	_, err = c2.Discover(ctx)
	if !errors.Is(err, ErrNoGateway) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Discover(short ctx) = %v, want ErrNoGateway and context.DeadlineExceeded", err)
	}
	assertReadersDone(t, n)
}

// assertReadersDone checks that every SSDP socket was closed and its reader
// goroutine saw the close.
func assertReadersDone(t *testing.T, n *ssdpNet) {
	t.Helper()
	n.mu.Lock()
	conns := n.conns
	n.mu.Unlock()
	if len(conns) == 0 {
		t.Fatal("no SSDP socket was opened")
	}
	for _, rc := range conns {
		select {
		case <-rc.readDone:
		default:
			t.Error("SSDP reader still running after Discover returned")
		}
	}
}

// A location of the gateway whose service never answers holds discovery
// for one CallTimeout, not DiscoveryTimeout (here a minute): the gateway's
// other service is chosen, and the silent one is listed as timed out.
func TestSSDPDiscoveryWaitsForASilentGatewayServiceOnlyOneCallTimeout(t *testing.T) {
	const gwIP = "127.0.0.3"
	fast := newSSDPDevice(t, igd1Device, gwIP, 0)
	slow := newSSDPDevice(t, igd2Device, gwIP, 0)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	slow.mu.Lock()
	slow.block = block // its SOAP calls never answer
	slow.mu.Unlock()
	n := &ssdpNet{t: t, devices: []*ssdpDevice{fast, slow}}
	c, err := NewClient(Config{
		ListenPacket:     n.ListenPacket,
		DiscoveryTimeout: time.Minute,
		SettleTime:       500 * time.Millisecond,
		CallTimeout:      time.Second,
		Host:             fakeHost{gw: netip.MustParseAddr(gwIP)},
	})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := c.Discover(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if gw.Location != fast.URL {
		t.Errorf("chose %s, want the service that answered (%s)", gw.Location, fast.URL)
	}
	var slowCand *Candidate
	for i := range gw.Candidates {
		if gw.Candidates[i].Location == slow.URL {
			slowCand = &gw.Candidates[i]
		}
	}
	if slowCand == nil || !strings.Contains(slowCand.Rejected, context.DeadlineExceeded.Error()) {
		t.Errorf("silent service's candidate = %+v, want rejected as not answering in time", slowCand)
	}
	assertReadersDone(t, n)
}

func TestSSDPDiscoverySocketError(t *testing.T) {
	boom := errors.New("no sockets here")
	c, err := NewClient(Config{ListenPacket: func(context.Context, string, string) (net.PacketConn, error) { return nil, boom }, Host: fakeHost{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Discover(testCtx(t)); !errors.Is(err, boom) {
		t.Fatalf("Discover() = %v, want the socket error", err)
	}
}

func TestParseSSDPAnswer(t *testing.T) {
	from := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1900}
	tests := []struct {
		name   string
		in     string
		ok     bool
		server string
	}{
		{"miniupnpd", "HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=120\r\nST: urn:schemas-upnp-org:service:WANIPConnection:2\r\nUSN: uuid:x::urn:schemas-upnp-org:service:WANIPConnection:2\r\nEXT:\r\nSERVER: Debian/12 UPnP/1.1 MiniUPnPd/2.3.1\r\nLOCATION: http://192.0.2.1:5000/rootDesc.xml\r\nOPT: \"http://schemas.upnp.org/upnp/1/0/\"; ns=01\r\n\r\n", true, "Debian/12 UPnP/1.1 MiniUPnPd/2.3.1"},
		{"lower-case header", "HTTP/1.1 200 OK\r\nlocation: http://192.0.2.1:5000/rootDesc.xml\r\n\r\n", true, ""},
		{"no location", "HTTP/1.1 200 OK\r\nST: x\r\n\r\n", false, ""},
		{"not a response", "NOTIFY * HTTP/1.1\r\nLOCATION: http://192.0.2.1/\r\n\r\n", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, ok := parseSSDPAnswer([]byte(tt.in), from)
			if ok != tt.ok {
				t.Fatalf("parseSSDPAnswer() ok = %v, want %v", ok, tt.ok)
			}
			if ok && (a.location != "http://192.0.2.1:5000/rootDesc.xml" || a.responder != netip.MustParseAddr("192.0.2.1") || a.server != tt.server) {
				t.Errorf("parseSSDPAnswer() = %+v", a)
			}
		})
	}
}

func TestSSDPDiscoverySendError(t *testing.T) {
	n := &ssdpNet{t: t}
	listen := func(ctx context.Context, network, addr string) (net.PacketConn, error) {
		pc, err := n.ListenPacket(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return unreachableConn{pc}, nil
	}
	c, err := NewClient(Config{ListenPacket: listen, Host: fakeHost{}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Discover(testCtx(t))
	if !errors.Is(err, ErrNoGateway) || !errors.Is(err, errUnreachable) {
		t.Fatalf("Discover() = %v, want ErrNoGateway wrapping the send error", err)
	}
	assertReadersDone(t, n)
}

var errUnreachable = errors.New("network is unreachable")

// unreachableConn fails every send, like a host without a multicast route.
type unreachableConn struct{ net.PacketConn }

func (unreachableConn) WriteTo([]byte, net.Addr) (int, error) { return 0, errUnreachable }

func TestSSDPDiscoveryEndsWhileAnswersKeepComing(t *testing.T) {
	// A socket that always has another answer: when discovery decides, the
	// SSDP reader is almost surely handing one over, and must not block on an
	// answer nobody reads any more (nor wait for DiscoveryTimeout).
	g := newTestIGD(t, igd2Device, "")
	answer := []byte("HTTP/1.1 200 OK\r\nST: " + upnp.ServiceWANIPConnection2 + "\r\nLOCATION: " + g.URL + "\r\n\r\n")
	from := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1900}
	var conns []*floodConn
	listen := func(ctx context.Context, network, addr string) (net.PacketConn, error) {
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		fc := &floodConn{PacketConn: pc, answer: answer, from: from, closed: make(chan struct{})}
		conns = append(conns, fc)
		return fc, nil
	}
	for range 5 {
		c, err := NewClient(Config{ListenPacket: listen, DiscoveryTimeout: time.Minute, SettleTime: 10 * time.Millisecond, Host: fakeHost{gw: netip.MustParseAddr("127.0.0.1")}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := c.Discover(testCtx(t))
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Discover hung while answers kept arriving")
		}
	}
	for _, fc := range conns {
		select {
		case <-fc.closed:
		default:
			t.Error("SSDP socket left open")
		}
	}
}

// floodConn answers every read at once with the same SSDP answer, until it
// is closed.
type floodConn struct {
	net.PacketConn
	answer    []byte
	from      net.Addr
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *floodConn) WriteTo(b []byte, _ net.Addr) (int, error) { return len(b), nil }

func (c *floodConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case <-c.closed:
		return 0, nil, net.ErrClosed
	default:
	}
	return copy(b, c.answer), c.from, nil
}

func (c *floodConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.PacketConn.Close()
}

func TestSSDPDiscoveryResistsRogueAnswers(t *testing.T) {
	const gwIP = "127.0.0.3"
	// rogue answers every search with 16 LOCATIONs on its own address, none
	// of which holds a description.
	rogue := func(t *testing.T, ip string) *ssdpDevice {
		d := newSSDPDevice(t, igd2Device, ip, 0)
		var locs []string
		for i := range 16 {
			locs = append(locs, fmt.Sprintf("%s/rogue%d.xml", d.srv.URL, i))
		}
		d.SetAnswers(locs, 0)
		return d
	}
	tests := []struct {
		name   string
		rogues []string // addresses of rogue hosts
	}{
		{"one host with 16 locations", []string{"127.0.0.2"}},
		{"five hosts with 16 locations each", []string{"127.0.0.10", "127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &ssdpNet{t: t}
			for _, ip := range tt.rogues {
				n.devices = append(n.devices, rogue(t, ip))
			}
			// The real router, the default gateway, answers 20 ms later.
			real := newSSDPDevice(t, igd1Device, gwIP, 20*time.Millisecond)
			n.devices = append(n.devices, real)
			c := newSSDPClient(t, n, netip.MustParseAddr(gwIP))
			gw, err := c.Discover(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if gw.Location != real.URL {
				t.Errorf("chose %s, want the default gateway %s", gw.Location, real.URL)
			}
			perHost := map[string]int{}
			for _, cand := range gw.Candidates {
				u, err := url.Parse(cand.Location)
				if err != nil {
					t.Fatal(err)
				}
				perHost[u.Hostname()]++
			}
			for host, got := range perHost {
				if host != gwIP && got > maxIgnoredPerHost {
					t.Errorf("listed %d locations of %s, want at most %d", got, host, maxIgnoredPerHost)
				}
			}
			for _, d := range n.devices[:len(tt.rogues)] {
				if f := d.DescFetches(); f != 0 {
					t.Errorf("fetched %d descriptions from %s, which is not the default gateway; want none", f, d.addr())
				}
			}
		})
	}
}

// discoverOnly runs one discovery, bounded by timeout, on a network where d
// is the only device, for tests that expect it to find no usable router.
func discoverOnly(t *testing.T, d *ssdpDevice, timeout time.Duration) (Gateway, error) {
	t.Helper()
	n := &ssdpNet{t: t, devices: []*ssdpDevice{d}}
	c, err := NewClient(Config{ListenPacket: n.ListenPacket, DiscoveryTimeout: timeout, Host: fakeHost{gw: d.addr()}})
	if err != nil {
		t.Fatal(err)
	}
	return c.Discover(testCtx(t))
}

func TestSSDPDiscoveryLocationMustBeTheAnsweringIP(t *testing.T) {
	tests := []struct {
		name string
		loc  func(g *ssdpDevice) string
	}{
		{"host name", func(g *ssdpDevice) string { return strings.Replace(g.URL, "127.0.0.1", "localhost", 1) }},
		{"another IP", func(g *ssdpDevice) string { return strings.Replace(g.URL, "127.0.0.1", "127.0.0.5", 1) }},
		{"IPv6 loopback", func(g *ssdpDevice) string { return strings.Replace(g.URL, "127.0.0.1", "[::1]", 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newSSDPDevice(t, igd2Device, "127.0.0.1", 0)
			d.SetAnswers([]string{tt.loc(d)}, 0)
			gw, err := discoverOnly(t, d, 500*time.Millisecond)
			if err == nil {
				t.Fatalf("Discover() chose %s, whose LOCATION does not name the answering IP", gw.Location)
			}
			if !strings.Contains(err.Error(), "not on the answering host 127.0.0.1") {
				t.Errorf("Discover() = %v, want the location rejected as not on the answering host", err)
			}
			if f := d.DescFetches(); f != 0 {
				t.Errorf("description fetched %d times, want 0", f)
			}
		})
	}
}

func TestSSDPDiscoveryIgnoresAnswersOverTheCap(t *testing.T) {
	d := newSSDPDevice(t, igd2Device, "127.0.0.1", 0)
	d.SetAnswers(nil, maxSSDPAnswerSize) // header plus this much is over the cap
	if _, err := discoverOnly(t, d, 300*time.Millisecond); !errors.Is(err, ErrNoGateway) || !strings.Contains(err.Error(), "no device answered") {
		t.Errorf("Discover() = %v, want no device answered", err)
	}
	if f := d.DescFetches(); f != 0 {
		t.Errorf("description fetched %d times after an answer over the cap, want 0", f)
	}
}

// A description from the answering host must not send this host's SOAP
// calls to another host (an absolute controlURL, or a URLBase elsewhere):
// that host would pass for the router.
func TestSSDPDiscoveryControlURLMustBeTheAnsweringIP(t *testing.T) {
	elsewhere := newTestIGD(t, igd2Device, "127.0.0.5:0")
	desc, err := os.ReadFile(filepath.Join("testdata", igd2Device.file))
	if err != nil {
		t.Fatal(err)
	}
	rogue := strings.Replace(string(desc), "<controlURL>/ctl/IPConn</controlURL>",
		"<controlURL>"+strings.TrimSuffix(elsewhere.URL, "/rootDesc.xml")+"/ctl/IPConn</controlURL>", 1)
	path := filepath.Join(t.TempDir(), "rogue-rootDesc.xml")
	if err := os.WriteFile(path, []byte(rogue), 0o644); err != nil {
		t.Fatal(err)
	}
	d := newSSDPDevice(t, device{path, igd2Device.serviceType, igd2Device.controlPath}, "127.0.0.1", 0)
	gw, err := discoverOnly(t, d, 500*time.Millisecond)
	if err == nil {
		t.Fatalf("Discover() chose %s, whose control URL %s is on another host", gw.Location, gw.ControlURL)
	}
	if !strings.Contains(err.Error(), "is not on the answering host 127.0.0.1") {
		t.Errorf("Discover() = %v, want the control URL rejected as not on the answering host", err)
	}
}
