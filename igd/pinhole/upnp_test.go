package pinhole_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

var gua = netip.MustParseAddr("2001:db8:1::10")

// fakeRouter serves a fake router on the IPv6 loopback, seeing every caller
// as gua, and returns its description URL. It skips the test where the
// machine has no IPv6 loopback.
func fakeRouter(t *testing.T, r *fake.Router) string {
	t.Helper()
	s, err := fake.NewServer6(r, fake.ServerOptions{ClientAddr: func(*http.Request) netip.Addr { return gua }})
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(s.Close)
	return s.RootDescURL
}

// asGUA dials over loopback and reports gua as the connection's local
// address, as a host whose request leaves from its GUA.
var asGUA = fake.DialAs(gua)

// TestClientSendsNothingFromAnotherAddress: a connection that left from
// another address than Config.LocalAddr (here ::1) is closed before the
// request is sent, since the router would judge the pinhole by it.
func TestClientSendsNothingFromAnotherAddress(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	var d net.Dialer // leaves from ::1
	c, err := pinhole.New(pinhole.Config{LocalAddr: gua, RootDescURL: fakeRouter(t, r), DialContext: d.DialContext})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Add(t.Context(), pinhole.Pinhole{InternalClient: gua, InternalPort: 8443, Protocol: igd.TCP, Lease: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "not from Config.LocalAddr") {
		t.Fatalf("Add from ::1 = %v, want an error saying the connection did not leave from Config.LocalAddr", err)
	}
	if calls := r.Calls(); len(calls) != 0 {
		t.Errorf("the router received %v, want nothing", calls)
	}
}

// TestUnknownIDAnsweredAsTheSpecificationSays: a router that answers 704
// NoSuchEntry (the specification's code; miniupnpd says 402) for an unknown
// ID gets the same treatment: Delete returns nil, the others
// ErrNoSuchPinhole.
func TestUnknownIDAnsweredAsTheSpecificationSays(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	r.Intercept(fake.RouterHooks{SOAPAction: func(_ context.Context, _ netip.Addr, action string, next fake.ActionFunc) error {
		return &igd.UPnPError{Action: action, Code: 704, Description: "NoSuchEntry"}
	}})
	c, err := pinhole.New(pinhole.Config{LocalAddr: gua, RootDescURL: fakeRouter(t, r), DialContext: asGUA})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := c.Delete(ctx, 7); err != nil {
		t.Errorf("Delete: %v, want nil", err)
	}
	if err := c.Update(ctx, 7, time.Hour); !errors.Is(err, pinhole.ErrNoSuchPinhole) || igd.Code(err) != 704 {
		t.Errorf("Update: %v, want ErrNoSuchPinhole carrying 704", err)
	}
	if _, err := c.Packets(ctx, 7); !errors.Is(err, pinhole.ErrNoSuchPinhole) {
		t.Errorf("Packets: %v, want ErrNoSuchPinhole", err)
	}
}

// TestDeleteReturnsOtherRefusals: only "no such pinhole" counts as deleted;
// a refusal (606, another host's pinhole) is returned.
func TestDeleteReturnsOtherRefusals(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	r.Intercept(fake.RouterHooks{SOAPAction: func(_ context.Context, _ netip.Addr, action string, next fake.ActionFunc) error {
		return &igd.UPnPError{Action: action, Code: 606, Description: "Action not authorized"}
	}})
	c, err := pinhole.New(pinhole.Config{LocalAddr: gua, RootDescURL: fakeRouter(t, r), DialContext: asGUA})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(t.Context(), 7); !errors.Is(err, igd.ErrNotAuthorized) {
		t.Errorf("Delete: %v, want igd.ErrNotAuthorized", err)
	}
}

// TestDescriptionInLatin1: a router whose root description declares
// ISO-8859-1 (and writes its name in it, as some home routers do) is used
// as igd's client uses it: the pinhole is opened.
func TestDescriptionInLatin1(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	s, err := fake.NewServer6(r, fake.ServerOptions{ClientAddr: func(*http.Request) netip.Addr { return gua }})
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(s.Close)
	latin1 := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/rootDesc.xml" {
			s.ServeHTTP(w, req)
			return
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		body := strings.Replace(rec.Body.String(), `<?xml version="1.0"?>`, `<?xml version="1.0" encoding="ISO-8859-1"?>`, 1)
		body = strings.Replace(body, "<friendlyName>Debian router</friendlyName>", "<friendlyName>Fritz\xe4Box</friendlyName>", 1)
		w.Header().Set("Content-Type", "text/xml; charset=\"iso-8859-1\"")
		io.WriteString(w, body)
	})
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skip(err)
	}
	hs := &http.Server{Handler: latin1}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	c, err := pinhole.New(pinhole.Config{LocalAddr: gua, RootDescURL: "http://" + ln.Addr().String() + "/rootDesc.xml", DialContext: asGUA})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add(t.Context(), pinhole.Pinhole{InternalClient: gua, InternalPort: 8443, Protocol: igd.TCP, Lease: time.Hour}); err != nil {
		t.Fatalf("Add through a router describing itself in ISO-8859-1: %v", err)
	}
	if got := len(r.Pinholes()); got != 1 {
		t.Errorf("the router holds %d pinholes, want 1", got)
	}
}

// TestLocalAddrsIsTheAddressRequestsLeaveFrom: LocalAddrs answers
// Config.LocalAddr, the one address the client opens pinholes to, without
// a call to the router.
func TestLocalAddrsIsTheAddressRequestsLeaveFrom(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	c, err := pinhole.New(pinhole.Config{LocalAddr: gua, RootDescURL: fakeRouter(t, r), DialContext: asGUA})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.LocalAddrs(t.Context())
	if err != nil || len(got) != 1 || got[0] != gua {
		t.Errorf("LocalAddrs = %v, %v; want [%s], nil", got, err, gua)
	}
	if calls := r.Calls(); len(calls) != 0 {
		t.Errorf("the router received %v, want nothing", calls)
	}
}
