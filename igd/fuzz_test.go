package igd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccmkit/ccmkit/internal/igderr"
	"github.com/ccmkit/ccmkit/internal/upnp"
	"github.com/huin/goupnp"
)

// The fuzz targets of the client's parsers of what routers (and any LAN host)
// send. Their seeds are the captured miniupnpd answers in testdata, so they
// also run as plain tests; `make fuzz-smoke` runs each for FUZZTIME.

// readFixture returns a testdata file, failing f when it is missing.
func readFixture(f *testing.F, name string) []byte {
	f.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzParseRootDescription parses arbitrary root descriptions and looks for
// the connection services in them, as probe does.
func FuzzParseRootDescription(f *testing.F) {
	for _, dev := range devices {
		f.Add(readFixture(f, dev.file))
	}
	loc, err := url.Parse("http://192.0.2.1:5000/rootDesc.xml")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, desc []byte) {
		root, err := upnp.ParseRoot(bytes.NewReader(desc), loc)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "parse description: ") {
				t.Fatalf("error %q does not say what failed", err)
			}
			return
		}
		for _, st := range serviceTypes {
			for _, srv := range root.Device.FindService(st) {
				if srv.ControlURL.Ok && srv.ControlURL.URL.String() == "" {
					t.Fatalf("control URL %q resolved to nothing", srv.ControlURL.Str)
				}
			}
		}
	})
}

// soapSeeds are SOAP answers to seed FuzzSOAPAnswer with: the captured
// GetListOfPortMappings answer, and answers shaped like miniupnpd's for the
// other actions (no capture of those is kept).
func soapSeeds(f *testing.F) [][]byte {
	const head = `<?xml version="1.0"?>` + "\n" + `<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/" s:encodingStyle="http://schemas.xmlsoap.org/soap/encoding/"><s:Body>`
	const tail = `</s:Body></s:Envelope>`
	answer := func(action, args string) []byte {
		return []byte(fmt.Sprintf(`%s<u:%sResponse xmlns:u="%s">%s</u:%sResponse>%s`, head, action, upnp.ServiceWANIPConnection2, args, action, tail))
	}
	return [][]byte{
		readFixture(f, "miniupnpd-2.3.1-GetListOfPortMappings-TCP.xml"),
		answer("GetExternalIPAddress", "<NewExternalIPAddress>198.51.101.7</NewExternalIPAddress>"),
		answer("GetStatusInfo", "<NewConnectionStatus>Connected</NewConnectionStatus><NewLastConnectionError>ERROR_NONE</NewLastConnectionError><NewUptime>42</NewUptime>"),
		answer("GetSpecificPortMappingEntry", "<NewInternalPort>30080</NewInternalPort><NewInternalClient>192.0.2.10</NewInternalClient><NewEnabled>1</NewEnabled><NewPortMappingDescription>ccmkit</NewPortMappingDescription><NewLeaseDuration>3600</NewLeaseDuration>"),
		answer("GetGenericPortMappingEntry", "<NewRemoteHost></NewRemoteHost><NewExternalPort>8080</NewExternalPort><NewProtocol>TCP</NewProtocol><NewInternalPort>30080</NewInternalPort><NewInternalClient>192.0.2.10</NewInternalClient><NewEnabled>1</NewEnabled><NewPortMappingDescription>ccmkit</NewPortMappingDescription><NewLeaseDuration>3600</NewLeaseDuration>"),
		[]byte(head + `<s:Fault><faultcode>s:Client</faultcode><faultstring>UPnPError</faultstring><detail><UPnPError xmlns="urn:schemas-upnp-org:control-1-0"><errorCode>714</errorCode><errorDescription>NoSuchEntryInArray</errorDescription></UPnPError></detail></s:Fault>` + tail),
	}
}

// FuzzSOAPAnswer feeds arbitrary answers to every SOAP call the client makes,
// through goupnp's generated client and the client's capped transport (no
// network: the transport answers from memory), and parses what they return
// as the client does.
func FuzzSOAPAnswer(f *testing.F) {
	for _, seed := range soapSeeds(f) {
		for _, ok := range []bool{true, false} { // HTTP 200 or 500
			f.Add(seed, ok)
		}
	}
	root := new(goupnp.RootDevice)
	loc, err := url.Parse("http://192.0.2.1:5000/rootDesc.xml")
	if err != nil {
		f.Fatal(err)
	}
	srv := &goupnp.Service{ServiceType: upnp.ServiceWANIPConnection2}
	srv.ControlURL.Str = "/ctl/IPConn"
	srv.ControlURL.SetURLBase(loc)
	f.Fuzz(func(t *testing.T, body []byte, ok bool) {
		status := http.StatusOK
		if !ok {
			status = http.StatusInternalServerError
		}
		mem := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: status, Status: http.StatusText(status), Header: http.Header{},
				Body: io.NopCloser(bytes.NewReader(body)), ContentLength: -1, Request: r}, nil
		})
		conn := newConn(root, loc, srv, cappedClient(&http.Client{Transport: mem}))
		// run makes one call as the client does and checks what callError
		// makes of its error.
		run := func(action string, fn func(ctx context.Context) error) {
			ctx := withOversizeRecord(context.Background())
			err := fn(ctx)
			if err == nil {
				return
			}
			wrapped, _ := callError(ctx, action, err)
			if wrapped == nil || !strings.Contains(wrapped.Error(), action) {
				t.Fatalf("%s: callError(%v) = %v, want an error naming the action", action, err, wrapped)
			}
			tooLarge := errors.Is(wrapped, ErrAnswerTooLarge)
			limit := maxSOAPAnswerSize
			if action == "GetListOfPortMappings" {
				limit = maxListAnswerSize
			}
			// An answer may fail to parse before the cap is reached.
			if tooLarge && len(body) <= limit {
				t.Fatalf("%s: %d-byte answer, error %v", action, len(body), wrapped)
			}
		}
		run("GetListOfPortMappings", func(ctx context.Context) error {
			lister, _ := conn.(portMappingLister)
			listing, err := lister.GetListOfPortMappingsCtx(ctx, 0, 65535, "TCP", true, 1000)
			if err != nil {
				return err
			}
			parsePortListing(listing) // checked by FuzzParsePortListing
			return nil
		})
		run("GetExternalIPAddress", func(ctx context.Context) error {
			s, err := conn.GetExternalIPAddressCtx(ctx)
			if err != nil {
				return err
			}
			checkExternalIP(t, s)
			return nil
		})
		run("GetStatusInfo", func(ctx context.Context) error {
			_, _, _, err := conn.GetStatusInfoCtx(ctx)
			return err
		})
		run("GetSpecificPortMappingEntry", func(ctx context.Context) error {
			_, client, _, _, _, err := conn.GetSpecificPortMappingEntryCtx(ctx, "", 8080, "TCP")
			parseAddr(client)
			return err
		})
		run("GetGenericPortMappingEntry", func(ctx context.Context) error {
			remote, _, _, _, client, _, _, _, err := conn.GetGenericPortMappingEntryCtx(ctx, 0)
			parseAddr(remote)
			parseAddr(client)
			return err
		})
	})
}

// checkExternalIP checks that parseExternalIP accepts only IPv4 host
// addresses and quotes what it refuses.
func checkExternalIP(t *testing.T, s string) {
	t.Helper()
	a, err := parseExternalIP(s)
	if err != nil {
		var eie *igderr.ExternalIPError
		if !errors.As(err, &eie) || !errors.Is(err, ErrInvalidExternalIP) || eie.Value != s {
			t.Fatalf("parseExternalIP(%q) error = %#v, want an *igderr.ExternalIPError quoting it", s, err)
		}
		return
	}
	if !a.Is4() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() {
		t.Fatalf("parseExternalIP(%q) = %s, want no such address accepted", s, a)
	}
}

// FuzzParsePortListing parses arbitrary PortMappingList documents, the
// NewPortListing of a GetListOfPortMappings answer.
func FuzzParsePortListing(f *testing.F) {
	raw := string(readFixture(f, "miniupnpd-2.3.1-GetListOfPortMappings-TCP.xml"))
	const open, end = "<![CDATA[", "]]>"
	i, j := strings.Index(raw, open), strings.Index(raw, end)
	if i < 0 || j < i {
		f.Fatal("fixture has no CDATA listing")
	}
	f.Add(raw[i+len(open) : j])
	f.Add(`<p:PortMappingList xmlns:p="urn:schemas-upnp-org:gw:WANIPConnection"></p:PortMappingList>`)
	f.Fuzz(func(t *testing.T, listing string) {
		ms, err := parsePortListing(listing)
		if err != nil {
			return
		}
		if n := strings.Count(listing, "PortMappingEntry"); len(ms) > n {
			t.Fatalf("%d mappings from a listing naming PortMappingEntry %d times", len(ms), n)
		}
	})
}

// FuzzParseExternalIP checks the validation of GetExternalIPAddress answers.
func FuzzParseExternalIP(f *testing.F) {
	for _, s := range []string{"198.51.101.7", "::ffff:198.51.101.7", "0.0.0.0", "", "2001:db8::1", "10.0.0.2"} {
		f.Add(s)
	}
	f.Fuzz(checkExternalIP)
}

// FuzzParseSSDPAnswer parses arbitrary SSDP answer datagrams.
func FuzzParseSSDPAnswer(f *testing.F) {
	// miniupnpd 2.3.1's answer to a WANIPConnection:2 search (no capture is
	// kept in testdata; this is its shape, as TestParseSSDPAnswer has it).
	f.Add([]byte("HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=120\r\nST: urn:schemas-upnp-org:service:WANIPConnection:2\r\nUSN: uuid:x::urn:schemas-upnp-org:service:WANIPConnection:2\r\nEXT:\r\nSERVER: Debian/12 UPnP/1.1 MiniUPnPd/2.3.1\r\nLOCATION: http://192.0.2.1:5000/rootDesc.xml\r\nOPT: \"http://schemas.upnp.org/upnp/1/0/\"; ns=01\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nlocation: http://192.0.2.1:5000/rootDesc.xml\r\n\r\n"))
	from := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1900}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, ok := parseSSDPAnswer(b, from)
		if !ok {
			return
		}
		if a.location == "" || a.responder != netip.MustParseAddr("192.0.2.1") {
			t.Fatalf("parseSSDPAnswer() = %+v, want a location and the sender", a)
		}
	})
}
