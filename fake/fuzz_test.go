package fake

import (
	"bytes"
	"encoding/binary"
	"encoding/xml"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// FuzzParseSOAPRequest checks that no SOAPAction header and body make the
// parser panic, and that what it accepts is consistent. The seed corpus in
// testdata/fuzz/FuzzParseSOAPRequest (real requests as goupnp sends them,
// and broken ones) runs as a normal test; explore with
// go test -fuzz=FuzzParseSOAPRequest ./fake/.
func FuzzParseSOAPRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, soapAction string, body []byte) {
		req, err := parseSOAPRequest(soapAction, body)
		if err != nil {
			if err != errInvalidAction && err != errInvalidArgs {
				t.Fatalf("error %v is neither errInvalidAction nor errInvalidArgs", err)
			}
			return
		}
		if !isName(req.Action) || req.Action == "" {
			t.Fatalf("accepted action %q", req.Action)
		}
		if !strings.Contains(soapAction, "#"+req.Action) {
			t.Fatalf("action %q does not come from the header %q", req.Action, soapAction)
		}
		if len(req.Args) > maxArgs {
			t.Fatalf("%d arguments, limit %d", len(req.Args), maxArgs)
		}
	})
}

// FuzzServeControl sends arbitrary requests through the whole control
// endpoint and checks that every answer is a well-formed SOAP response or
// a miniupnpd-shaped fault, never a panic or a broken body.
func FuzzServeControl(f *testing.F) {
	f.Fuzz(func(t *testing.T, soapAction string, body []byte) {
		r := NewRouter(RouterConfig{Capacity: 4})
		h := newHandler(r, ServerOptions{ClientAddr: func(*http.Request) netip.Addr { return netip.MustParseAddr("192.0.2.10") }})
		req := httptest.NewRequest(http.MethodPost, ipConnPath, bytes.NewReader(body))
		req.Header.Set("SOAPAction", soapAction)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		var env struct {
			Fault *struct {
				Code int `xml:"detail>UPnPError>errorCode"`
			} `xml:"Body>Fault"`
		}
		if err := xml.Unmarshal(w.Body.Bytes(), &env); err != nil {
			t.Fatalf("status %d, body is not XML: %v\n%s", w.Code, err, w.Body.Bytes())
		}
		switch w.Code {
		case http.StatusOK:
			if env.Fault != nil {
				t.Fatalf("200 with a fault:\n%s", w.Body.Bytes())
			}
		case http.StatusInternalServerError:
			if env.Fault == nil || env.Fault.Code < 401 || env.Fault.Code > 799 {
				t.Fatalf("500 without a UPnP error code:\n%s", w.Body.Bytes())
			}
		default:
			t.Fatalf("status %d", w.Code)
		}
	})
}

// FuzzPCPServerRequest sends arbitrary datagrams to the PCP server's
// request decoding (handle, as the serve loop calls it, without a socket)
// on a fresh router each time, and checks that it answers as miniupnpd
// does: nothing to a response or a datagram too short to read; a 12-byte
// NAT-PMP answer to a public address request; otherwise a response, the
// request's length rounded up to 4 and at least a header long, with a
// result code the RFC names; and that a mapping it makes is a valid one.
// The seeds in testdata/fuzz/FuzzPCPServerRequest include requests as
// igd/pcp sends them to miniupnpd.
func FuzzPCPServerRequest(f *testing.F) {
	client := netip.MustParseAddrPort("192.0.2.10:5350")
	mapReq := func(lifetime uint32, proto byte, intPort, extPort uint16, opts ...byte) []byte {
		b := make([]byte, pcpHeaderLen+pcpMapLen, pcpHeaderLen+pcpMapLen+len(opts))
		b[0], b[1] = pcpVersion, pcpOpMap
		binary.BigEndian.PutUint32(b[4:], lifetime)
		a := client.Addr().As16()
		copy(b[8:24], a[:])
		p := b[pcpHeaderLen:]
		copy(p[0:12], "nonce-nonce!")
		p[12] = proto
		binary.BigEndian.PutUint16(p[16:], intPort)
		binary.BigEndian.PutUint16(p[18:], extPort)
		p[30], p[31] = 0xff, 0xff // ::ffff:0.0.0.0, no suggested address
		return append(b, opts...)
	}
	thirdParty := append([]byte{pcpOptThirdParty, 0, 0, 16}, netip.MustParseAddr("::ffff:192.0.2.11").AsSlice()...)
	f.Add(mapReq(3600, pcpProtoTCP, 30080, 8080), true)
	f.Add(mapReq(0, pcpProtoTCP, 30080, 0), true)                                  // delete
	f.Add(mapReq(120, pcpProtoUDP, 30053, 53, pcpOptPreferFailure, 0, 0, 0), true) // PREFER_FAILURE
	f.Add(mapReq(120, pcpProtoTCP, 30080, 8080, thirdParty...), true)              // THIRD_PARTY
	f.Add(mapReq(120, pcpProtoTCP, 30080, 8080, thirdParty...), false)             // refused
	f.Add(mapReq(120, pcpProtoTCP, 30080, 8080, 0x7f, 0, 0, 0), true)              // unknown mandatory option
	f.Add(append([]byte{2, 0, 0, 0}, make([]byte, 20)...), true)                   // ANNOUNCE request
	f.Add([]byte{0, 0}, true)                                                      // NAT-PMP public address
	f.Add(append([]byte{3, 1, 0, 0}, make([]byte, 56)...), true)                   // a later version
	f.Fuzz(func(t *testing.T, b []byte, allowThirdParty bool) {
		r := NewRouter(RouterConfig{})
		s, err := NewPCPServer(PCPConfig{Router: r, Conn: newIdleConn(), AllowThirdParty: allowThirdParty})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		answer, call := s.handle(b, client)
		switch {
		case len(b) < 2 || b[1]&pcpResponseBit != 0:
			if answer != nil {
				t.Fatalf("answered % x to % x, a response or too short", answer, b)
			}
			return
		case b[0] == 0 && b[1] == 0:
			if len(answer) != 12 || answer[0] != 0 || answer[1] != 128 {
				t.Fatalf("answered % x to a NAT-PMP public address request", answer)
			}
			return
		case len(b) < 3 || b[0] == 0 || b[0] == 1:
			if answer != nil {
				t.Fatalf("answered % x to % x, which it does not model", answer, b)
			}
			return
		}
		if want := max(pcpHeaderLen, (len(b)+3)&^3); len(answer) != want || answer[1]&pcpResponseBit == 0 {
			t.Fatalf("answered % x (%d bytes) to % x, want a response of %d bytes", answer, len(answer), b, want)
		}
		if pcpwire.ResultCode(answer[3]) != call.Result || call.Result > pcpwire.ExcessiveRemotePeers {
			t.Fatalf("answer's result %d, call's %v: want one code the RFC names", answer[3], call.Result)
		}
		for _, m := range r.Mappings() {
			if err := m.Validate(); err != nil && m.InternalPort != 0 {
				t.Fatalf("request % x made the invalid mapping %v: %v", b, m, err)
			}
		}
	})
}

// idleConn is a PacketConn that receives nothing until it is closed and
// discards what is sent: a PCPServer whose handle a test calls directly.
type idleConn struct {
	closed chan struct{}
	once   sync.Once
}

func newIdleConn() *idleConn { return &idleConn{closed: make(chan struct{})} }

func (c *idleConn) ReadFrom([]byte) (int, net.Addr, error) {
	<-c.closed
	return 0, nil, net.ErrClosed
}
func (c *idleConn) WriteTo(b []byte, _ net.Addr) (int, error) { return len(b), nil }
func (c *idleConn) Close() error                              { c.once.Do(func() { close(c.closed) }); return nil }
func (c *idleConn) LocalAddr() net.Addr {
	return net.UDPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.1:5351"))
}
func (c *idleConn) SetDeadline(time.Time) error      { return nil }
func (c *idleConn) SetReadDeadline(time.Time) error  { return nil }
func (c *idleConn) SetWriteDeadline(time.Time) error { return nil }
