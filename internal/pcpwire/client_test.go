package pcpwire

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/igderr"
	"github.com/google/go-cmp/cmp"
)

// fakeServer is a PCP server on loopback whose answers a test writes: reply
// gets each request and returns the datagrams to send back (none to drop
// it). It records the requests.
type fakeServer struct {
	t     *testing.T
	pc    net.PacketConn
	reply func(n int, req []byte) [][]byte

	mu   sync.Mutex
	reqs [][]byte
}

func startFake(t *testing.T, reply func(n int, req []byte) [][]byte) *fakeServer {
	t.Helper()
	return startFakeOn(t, "udp4", "127.0.0.1:0", reply)
}

// startFakeOn is startFake on network and address, such as "udp6" and
// "[::1]:0".
func startFakeOn(t *testing.T, network, address string, reply func(n int, req []byte) [][]byte) *fakeServer {
	t.Helper()
	pc, err := net.ListenPacket(network, address)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{t: t, pc: pc, reply: reply}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			req := append([]byte{}, buf[:n]...)
			f.mu.Lock()
			f.reqs = append(f.reqs, req)
			i := len(f.reqs)
			f.mu.Unlock()
			for _, b := range f.reply(i, req) {
				pc.WriteTo(b, from)
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return f
}

func (f *fakeServer) addr() netip.AddrPort {
	return netip.MustParseAddrPort(f.pc.LocalAddr().String())
}

func (f *fakeServer) requests() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte{}, f.reqs...)
}

// mapReply answers req as miniupnpd would: the request echoed with the R
// bit, result, lifetime and epoch set and the assigned external address
// and port written in.
func mapReply(req []byte, result ResultCode, lifetime, epoch uint32, ext netip.AddrPort) []byte {
	b := append([]byte{}, req...)
	b[1] |= responseBit
	b[3] = byte(result)
	binary.BigEndian.PutUint32(b[4:], lifetime)
	binary.BigEndian.PutUint32(b[8:], epoch)
	clear(b[12:24])
	binary.BigEndian.PutUint16(b[headerLen+18:], ext.Port())
	putAddr(b[headerLen+20:headerLen+36], ext.Addr())
	return b
}

var extAddr = netip.MustParseAddrPort("198.51.101.7:8080")

func newTestClient(t *testing.T, f *fakeServer, cfg Config) *Client {
	t.Helper()
	cfg.Server = f.addr()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMap(t *testing.T) {
	f := startFake(t, func(_ int, req []byte) [][]byte {
		return [][]byte{mapReply(req, Success, 7200, 100, extAddr)}
	})
	c := newTestClient(t, f, Config{})
	got, err := c.Map(context.Background(), MapRequest{
		Protocol: igd.TCP, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour, Nonce: testNonce,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := MapResult{ExternalAddr: extAddr.Addr(), ExternalPort: 8080, Lifetime: 2 * time.Hour, Epoch: 100}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("Map (-want +got):\n%s", diff)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("server got %d requests, want 1", len(reqs))
	}
	wantReq := encodeMap(mapMessage{
		Lifetime: 3600, ClientAddr: netip.MustParseAddr("127.0.0.1"), Nonce: testNonce,
		Protocol: protoTCP, InternalPort: 30080, ExternalPort: 8080,
	})
	if diff := cmp.Diff(wantReq, reqs[0]); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

func TestMapThirdPartyAndPreferFailure(t *testing.T) {
	f := startFake(t, func(_ int, req []byte) [][]byte {
		return [][]byte{mapReply(req, Success, 120, 100, extAddr)}
	})
	c := newTestClient(t, f, Config{})
	for _, tt := range []struct {
		name     string
		internal netip.Addr
		want     mapMessage
	}{
		{"another host", netip.MustParseAddr("192.0.2.11"), mapMessage{ThirdParty: netip.MustParseAddr("192.0.2.11")}},
		{"this host named", netip.MustParseAddr("127.0.0.1"), mapMessage{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := len(f.requests())
			if _, err := c.Map(context.Background(), MapRequest{
				Protocol: igd.UDP, InternalAddr: tt.internal, InternalPort: 30053, ExternalPort: 8080,
				Lifetime: 2 * time.Minute, PreferFailure: true, Nonce: testNonce,
			}); err != nil {
				t.Fatal(err)
			}
			w := tt.want
			w.Lifetime, w.ClientAddr, w.Nonce, w.Protocol = 120, netip.MustParseAddr("127.0.0.1"), testNonce, protoUDP
			w.InternalPort, w.ExternalPort, w.PreferFailure = 30053, 8080, true
			if diff := cmp.Diff(encodeMap(w), f.requests()[n]); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMapIgnoresWhatIsNotTheAnswer(t *testing.T) {
	f := startFake(t, func(_ int, req []byte) [][]byte {
		otherNonce := mapReply(req, NotAuthorized, 0, 100, extAddr)
		otherNonce[headerLen] ^= 0xff
		otherProto := mapReply(req, NotAuthorized, 0, 100, extAddr)
		otherProto[headerLen+12] = protoUDP
		truncated := mapReply(req, NotAuthorized, 0, 100, extAddr)[:40]
		return [][]byte{otherNonce, otherProto, truncated, req, []byte("garbage!"),
			mapReply(req, Success, 3600, 100, extAddr)}
	})
	c := newTestClient(t, f, Config{})
	got, err := c.Map(context.Background(), MapRequest{Protocol: igd.TCP, InternalPort: 30080, Lifetime: time.Hour, Nonce: testNonce})
	if err != nil {
		t.Fatalf("Map = %v, want the one matching answer's success", err)
	}
	if got.ExternalPort != 8080 {
		t.Errorf("ExternalPort = %d, want 8080", got.ExternalPort)
	}
}

func TestMapRetransmits(t *testing.T) {
	f := startFake(t, func(n int, req []byte) [][]byte {
		if n < 3 {
			return nil // lost
		}
		return [][]byte{mapReply(req, Success, 3600, 100, extAddr)}
	})
	c := newTestClient(t, f, Config{})
	start := time.Now()
	if _, err := c.Map(context.Background(), MapRequest{Protocol: igd.TCP, InternalPort: 30080, Lifetime: time.Hour, Nonce: testNonce}); err != nil {
		t.Fatal(err)
	}
	// Sends at 0, ~250 ms and ~750 ms (±10%).
	if el := time.Since(start); el < 600*time.Millisecond || el > 3*time.Second {
		t.Errorf("answered after %v, want about 750 ms (two retransmissions)", el)
	}
	reqs := f.requests()
	if len(reqs) != 3 {
		t.Fatalf("server got %d requests, want 3", len(reqs))
	}
	for i := range reqs[1:] {
		if diff := cmp.Diff(reqs[0], reqs[i+1]); diff != "" {
			t.Errorf("retransmission %d differs (-first +it):\n%s", i+1, diff)
		}
	}
}

// A MAP with Once is sent once: an answer slower than the retransmission
// time is waited for, and a lost one fails the call, with no second MAP
// (which miniupnpd < 2.3.6 would take as a renewal in place of an IPv6
// pinhole, dropping its nonce).
func TestMapOnceIsNotRetransmitted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lost    bool
		wantErr error
	}{
		{name: "slow answer"},
		{name: "lost answer", lost: true, wantErr: context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, func(_ int, req []byte) [][]byte {
				if tc.lost {
					return nil
				}
				time.Sleep(600 * time.Millisecond) // past two retransmission times
				return [][]byte{mapReply(req, Success, 3600, 100, extAddr)}
			})
			c := newTestClient(t, f, Config{CallTimeout: 2 * time.Second})
			_, err := c.Map(context.Background(), MapRequest{Protocol: igd.TCP, InternalPort: 30080, Lifetime: time.Hour, Nonce: testNonce, Once: true})
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("Map = %v, want %v", err, tc.wantErr)
			}
			time.Sleep(100 * time.Millisecond) // a retransmission queued behind the slow answer is read by now
			if n := len(f.requests()); n != 1 {
				t.Errorf("server got %d requests, want 1", n)
			}
		})
	}
}

func TestMapTimesOut(t *testing.T) {
	f := startFake(t, func(int, []byte) [][]byte { return nil })
	c := newTestClient(t, f, Config{CallTimeout: 400 * time.Millisecond})
	start := time.Now()
	_, err := c.Map(context.Background(), MapRequest{Protocol: igd.TCP, InternalPort: 30080, Lifetime: time.Hour, Nonce: testNonce})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Map = %v, want context.DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("gave up after %v, want about the 400 ms CallTimeout", el)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	c = newTestClient(t, f, Config{})
	if _, err := c.Map(ctx, MapRequest{Protocol: igd.TCP, InternalPort: 30080, Lifetime: time.Hour, Nonce: testNonce}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Map with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestResultErrors(t *testing.T) {
	for _, tt := range []struct {
		code ResultCode
		want error
	}{
		{NotAuthorized, ErrNotAuthorized},
		{CannotProvideExternal, ErrCannotProvideExternal},
		{UnsuppOption, ErrUnsupportedOption},
		{NoResources, ErrNoResources},
		{NetworkFailure, ErrNetworkFailure},
		{AddressMismatch, ErrAddressMismatch},
		{MalformedRequest, nil},
	} {
		t.Run(tt.code.String(), func(t *testing.T) {
			f := startFake(t, func(_ int, req []byte) [][]byte {
				return [][]byte{mapReply(req, tt.code, 30, 100, netip.AddrPortFrom(netip.IPv4Unspecified(), 0))}
			})
			c := newTestClient(t, f, Config{})
			err := c.Delete(context.Background(), igd.TCP, netip.Addr{}, 30080, testNonce)
			var re *ResultError
			if !errors.As(err, &re) || re.Code != tt.code || re.Op != "delete" || re.Lifetime != 30*time.Second {
				t.Fatalf("Delete = %#v, want a *ResultError{Op: delete, Code: %s, Lifetime: 30s}", err, tt.code)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.want)
			}
			for _, s := range codeSentinels {
				if s != tt.want && errors.Is(err, s) {
					t.Errorf("errors.Is(%v, %v) = true", err, s)
				}
			}
		})
	}
}

func TestUnsupportedVersion(t *testing.T) {
	f := startFake(t, func(_ int, req []byte) [][]byte {
		return [][]byte{{0, 0x81, 0, 1, 0, 0, 0, 0}} // a NAT-PMP-only server
	})
	c := newTestClient(t, f, Config{})
	_, err := c.Map(context.Background(), MapRequest{Protocol: igd.TCP, InternalPort: 30080, Lifetime: time.Hour, Nonce: testNonce})
	if !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("Map = %v, want ErrUnsupportedVersion", err)
	}
}

func TestDeleteRequest(t *testing.T) {
	f := startFake(t, func(_ int, req []byte) [][]byte {
		return [][]byte{mapReply(req, Success, 0, 100, netip.AddrPortFrom(netip.IPv4Unspecified(), 0))}
	})
	c := newTestClient(t, f, Config{})
	if err := c.Delete(context.Background(), igd.UDP, netip.MustParseAddr("192.0.2.11"), 30053, testNonce); err != nil {
		t.Fatal(err)
	}
	want := encodeMap(mapMessage{
		ClientAddr: netip.MustParseAddr("127.0.0.1"), Nonce: testNonce, Protocol: protoUDP,
		InternalPort: 30053, ThirdParty: netip.MustParseAddr("192.0.2.11"),
	})
	if diff := cmp.Diff(want, f.requests()[0]); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

func TestEpochRestart(t *testing.T) {
	epochs := []uint32{5000, 5000, 3} // the third answer went back
	f := startFake(t, func(n int, req []byte) [][]byte {
		return [][]byte{mapReply(req, Success, 3600, epochs[n-1], extAddr)}
	})
	c := newTestClient(t, f, Config{})
	mapOnce := func() {
		t.Helper()
		if _, err := c.Map(context.Background(), MapRequest{Protocol: igd.TCP, InternalPort: 30080, Lifetime: time.Hour, Nonce: testNonce}); err != nil {
			t.Fatal(err)
		}
	}
	mapOnce()
	mapOnce()
	select {
	case <-c.Restarts():
		t.Fatal("Restarts fired for a steady epoch")
	default:
	}
	mapOnce()
	select {
	case <-c.Restarts():
	default:
		t.Fatal("Restarts did not fire when the epoch went back")
	}
}

func TestLostState(t *testing.T) {
	for _, tt := range []struct {
		name      string
		prev, cur uint32
		elapsed   time.Duration
		want      bool
	}{
		{"steady", 1000, 1010, 10 * time.Second, false},
		{"same second", 1000, 1000, 0, false},
		{"one second back (rounding)", 1000, 999, 0, false},
		{"went back", 1000, 10, 10 * time.Second, true},
		{"server advanced much less", 1000, 1010, 10 * time.Minute, true},
		{"server advanced much more", 1000, 5000, 10 * time.Second, true},
		{"within 2 s plus 1/16", 1000, 1160, 150 * time.Second, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := lostState(tt.prev, tt.cur, tt.elapsed); got != tt.want {
				t.Errorf("lostState(%d, %d, %v) = %v, want %v", tt.prev, tt.cur, tt.elapsed, got, tt.want)
			}
		})
	}
}

func TestListenAnnounce(t *testing.T) {
	// The server's address is loopback; the listener is a loopback socket
	// standing in for 224.0.0.1:5350.
	ln, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(Config{
		Server: netip.MustParseAddrPort("127.0.0.1:5351"),
		ListenPacket: func(_ context.Context, network, addr string) (net.PacketConn, error) {
			if network != "udp4" || addr != "224.0.0.1:5350" {
				t.Errorf("ListenPacket(%q, %q), want (udp4, 224.0.0.1:5350)", network, addr)
			}
			return ln, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.ListenAnnounce(ctx) }()

	send, err := net.Dial("udp4", ln.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	announce := unhex(t, "02 80 00 00 00000000 0000002a 000000000000000000000000")
	notAnnounce := unhex(t, "02 81 00 00 00000000 0000002a 000000000000000000000000")
	send.Write(notAnnounce)
	select {
	case <-c.Restarts():
		t.Fatal("Restarts fired for a message that is no ANNOUNCE")
	case <-time.After(100 * time.Millisecond):
	}
	send.Write(announce)
	select {
	case <-c.Restarts():
	case <-time.After(5 * time.Second):
		t.Fatal("Restarts did not fire for an ANNOUNCE")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ListenAnnounce after cancel = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ListenAnnounce did not return when its context was cancelled")
	}
}

func TestNewClientValidates(t *testing.T) {
	for _, tt := range []struct {
		cfg   Config
		field string
	}{
		{Config{Server: netip.MustParseAddrPort("[ff02::1]:5351")}, "Config.Server"},
		{Config{Server: netip.MustParseAddrPort("[::]:5351")}, "Config.Server"},
		{Config{IPv6: true, Server: netip.MustParseAddrPort("192.0.2.1:5351")}, "Config.Server"},
		{Config{Server: netip.MustParseAddrPort("192.0.2.1:0")}, "Config.Server"},
		{Config{CallTimeout: -time.Second}, "Config.CallTimeout"},
	} {
		if _, err := NewClient(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("NewClient(%+v) = %v, want an error naming %s", tt.cfg, err, tt.field)
		}
	}
	if _, err := NewClient(Config{}); err != nil {
		t.Errorf("NewClient(Config{}) = %v", err)
	}
}

func TestMapValidates(t *testing.T) {
	c, err := NewClient(Config{Server: netip.MustParseAddrPort("127.0.0.1:9")})
	if err != nil {
		t.Fatal(err)
	}
	ok := MapRequest{Protocol: igd.TCP, InternalPort: 30080, Lifetime: time.Hour}
	for _, tt := range []struct {
		field string
		edit  func(*MapRequest)
	}{
		{"Protocol", func(r *MapRequest) { r.Protocol = "SCTP" }},
		{"InternalAddr", func(r *MapRequest) { r.InternalAddr = netip.MustParseAddr("2001:db8::1") }},
		{"InternalAddr", func(r *MapRequest) { r.InternalAddr = netip.IPv4Unspecified() }},
		{"InternalPort", func(r *MapRequest) { r.InternalPort = 0 }},
		{"Lifetime", func(r *MapRequest) { r.Lifetime = 0 }},
		{"ExternalPort", func(r *MapRequest) { r.PreferFailure = true }},
	} {
		r := ok
		tt.edit(&r)
		_, err := c.Map(context.Background(), r)
		var fe *igderr.FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("Map(%+v) = %v, want a FieldError for %s", r, err, tt.field)
		}
	}
}

func TestNonceFor(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	k := igd.Key{Protocol: igd.TCP, ExternalPort: 8080}
	a := NonceFor(secret, "default/web", k)
	if a != NonceFor(secret, "default/web", k) {
		t.Error("NonceFor is not deterministic")
	}
	for name, b := range map[string][12]byte{
		"other secret": NonceFor([]byte("another secret"), "default/web", k),
		"other owner":  NonceFor(secret, "default/web2", k),
		"other port":   NonceFor(secret, "default/web", igd.Key{Protocol: igd.TCP, ExternalPort: 8081}),
		"other proto":  NonceFor(secret, "default/web", igd.Key{Protocol: igd.UDP, ExternalPort: 8080}),
	} {
		if a == b {
			t.Errorf("%s: same nonce %x", name, a)
		}
	}
	// Pinned so that a change of derivation (which would orphan every
	// mapping made before it) cannot go unnoticed.
	if got, want := hex.EncodeToString(a[:]), "bf30ecfc52766b6dcefad20d"; got != want {
		t.Errorf("NonceFor = %s, want %s", got, want)
	}
}

func TestMapUndoesIgnoredPreferFailure(t *testing.T) {
	f := startFake(t, func(_ int, req []byte) [][]byte {
		// Like miniupnpd with CHECK_PORTINUSE: another port, PREFER_FAILURE
		// or not.
		return [][]byte{mapReply(req, Success, binary.BigEndian.Uint32(req[4:]), 100, netip.MustParseAddrPort("198.51.101.7:8082"))}
	})
	c := newTestClient(t, f, Config{})
	_, err := c.Map(context.Background(), MapRequest{Protocol: igd.TCP, InternalPort: 30080, ExternalPort: 8081, Lifetime: time.Hour, PreferFailure: true, Nonce: testNonce})
	if !errors.Is(err, ErrCannotProvideExternal) {
		t.Fatalf("Map = %v, want ErrCannotProvideExternal", err)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("server got %d requests, want the MAP and its undo", len(reqs))
	}
	wantUndo := encodeMap(mapMessage{ClientAddr: netip.MustParseAddr("127.0.0.1"), Nonce: testNonce, Protocol: protoTCP, InternalPort: 30080})
	if diff := cmp.Diff(wantUndo, reqs[1]); diff != "" {
		t.Errorf("undo request (-want +got):\n%s", diff)
	}
}

func TestMapConcurrent(t *testing.T) {
	f := startFake(t, func(_ int, req []byte) [][]byte {
		return [][]byte{mapReply(req, Success, 3600, 100, extAddr)}
	})
	c := newTestClient(t, f, Config{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			nonce := testNonce
			nonce[0] = byte(i)
			_, err := c.Map(context.Background(), MapRequest{Protocol: igd.TCP, InternalPort: 30080 + uint16(i), Lifetime: time.Hour, Nonce: nonce})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
