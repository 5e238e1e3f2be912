package igd

import (
	"context"
	"errors"
	"fmt"
	"github.com/ccmkit/ccmkit/internal/upnp"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// This file holds the tests of a client facing routers and LAN hosts that
// answer too much: the caps on every answer it reads.

const (
	// hostileSend is how much a hostile server sends at most before it stops
	// by itself: more than heapBudget, so that a client without a cap cannot
	// pass, and small enough for a shared test machine to survive the
	// uncapped client (whose heap grows several times what it reads).
	hostileSend = 96 << 20
	// heapBudget is what one capped call may allocate in all (not only keep)
	// while a hostile server streams at it.
	heapBudget = 48 << 20
)

// streamAnswer writes head and then repeats chunk until the client stops
// reading or hostileSend bytes went out: an answer that, as far as the
// client can tell, never ends. declared, when non-zero, is sent as the
// Content-Length.
func streamAnswer(w http.ResponseWriter, head, chunk string, declared int64) {
	w.Header().Set("Content-Type", `text/xml; charset="utf-8"`)
	if declared > 0 {
		w.Header().Set("Content-Length", fmt.Sprint(declared))
	}
	if _, err := io.WriteString(w, head); err != nil {
		return
	}
	for sent := len(head); sent < hostileSend; sent += len(chunk) {
		if _, err := io.WriteString(w, chunk); err != nil {
			return // the client hung up: what a capped client does
		}
	}
}

// hostileIGD serves g's description and SOAP actions, except the one
// SetEndless names.
type hostileIGD struct {
	*httptest.Server

	mu       sync.Mutex
	action   string // "description", a SOAP action, or "" for none
	declared int64
}

// SetEndless makes the description (action "description") or the named SOAP
// action answer with an endless stream, declaring a Content-Length of
// declared bytes unless it is 0.
func (h *hostileIGD) SetEndless(action string, declared int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.action, h.declared = action, declared
}

func newHostileIGD(t *testing.T, g *testIGD) *hostileIGD {
	t.Helper()
	ns := g.dev.serviceType
	soapHead := `<?xml version="1.0"?>` + "\n" + `<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/" s:encodingStyle="http://schemas.xmlsoap.org/soap/encoding/"><s:Body>`
	h := &hostileIGD{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		action, declared := h.action, h.declared
		h.mu.Unlock()
		switch {
		case action == "description" && r.Method == http.MethodGet:
			streamAnswer(w, `<?xml version="1.0"?><root xmlns="urn:schemas-upnp-org:device-1-0"><device><friendlyName>`,
				strings.Repeat("Router ", 1024), declared)
		case r.Method == http.MethodPost && strings.HasSuffix(strings.Trim(r.Header.Get("SOAPACTION"), `"`), "#"+action):
			var head, chunk string
			switch action {
			case "GetListOfPortMappings":
				// Entries escaped as text, as routers without CDATA send them.
				head = `<u:GetListOfPortMappingsResponse xmlns:u="` + ns + `"><NewPortListing>&lt;p:PortMappingList xmlns:p="urn:schemas-upnp-org:gw:WANIPConnection"&gt;`
				chunk = strings.Repeat(`&lt;p:PortMappingEntry&gt;&lt;p:NewRemoteHost&gt;&lt;/p:NewRemoteHost&gt;&lt;p:NewExternalPort&gt;8080&lt;/p:NewExternalPort&gt;&lt;p:NewProtocol&gt;TCP&lt;/p:NewProtocol&gt;&lt;p:NewInternalPort&gt;8080&lt;/p:NewInternalPort&gt;&lt;p:NewInternalClient&gt;192.0.2.10&lt;/p:NewInternalClient&gt;&lt;p:NewEnabled&gt;1&lt;/p:NewEnabled&gt;&lt;p:NewDescription&gt;x&lt;/p:NewDescription&gt;&lt;p:NewLeaseTime&gt;0&lt;/p:NewLeaseTime&gt;&lt;/p:PortMappingEntry&gt;`, 16)
			default:
				head = `<u:` + action + `Response xmlns:u="` + ns + `"><NewConnectionStatus>`
				chunk = strings.Repeat("Connected", 1024)
			}
			streamAnswer(w, soapHead+head, chunk, declared)
		default:
			g.srv.Config.Handler.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(h.Close)
	return h
}

// allocated returns the bytes f allocated in all, whether kept or not.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestEndlessAnswersAreCapped(t *testing.T) {
	tests := []struct {
		name     string
		action   string // what answers endlessly
		declared int64  // Content-Length sent, 0 for none (chunked)
		// userClient sets Config.HTTPClient: the cap must hold for it too.
		userClient bool
		call       func(context.Context, *UPnPClient) error
		// discovery reports the cap as a rejected candidate (no typed error).
		discovery bool
		capText   string
	}{
		{name: "description", action: "description", discovery: true, capText: "1 MiB"},
		{name: "description, declared length", action: "description", declared: 1 << 40, discovery: true, capText: "1 MiB"},
		{name: "GetStatusInfo during discovery", action: "GetStatusInfo", discovery: true, capText: "64 KiB"},
		{name: "GetExternalIPAddress", action: "GetExternalIPAddress", capText: "64 KiB",
			call: func(ctx context.Context, c *UPnPClient) error { _, err := c.ExternalIP(ctx); return err }},
		{name: "GetListOfPortMappings", action: "GetListOfPortMappings", capText: "4 MiB",
			call: func(ctx context.Context, c *UPnPClient) error {
				_, err := c.ListPortMappings(ctx, TCP, PortRange{First: 1, Last: 65535})
				return err
			}},
		{name: "GetListOfPortMappings, declared length", action: "GetListOfPortMappings", declared: 1 << 40, capText: "4 MiB",
			call: func(ctx context.Context, c *UPnPClient) error {
				_, err := c.ListPortMappings(ctx, TCP, PortRange{First: 1, Last: 65535})
				return err
			}},
		{name: "GetListOfPortMappings, user's HTTP client", action: "GetListOfPortMappings", userClient: true, capText: "4 MiB",
			call: func(ctx context.Context, c *UPnPClient) error {
				_, err := c.ListPortMappings(ctx, TCP, PortRange{First: 1, Last: 65535})
				return err
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestIGD(t, igd2Device, "")
			// The hostile server answers everything else like g, so
			// discovery succeeds unless the endless answer is part of it.
			h := newHostileIGD(t, g)
			if tt.discovery {
				h.SetEndless(tt.action, tt.declared)
			}
			c := newTestClient(t, g, func(cfg *Config) {
				cfg.RootDescURL = h.URL + "/rootDesc.xml"
				if tt.userClient {
					cfg.HTTPClient = &http.Client{} // keep-alives on, no cap of its own
				}
			})
			ctx := testCtx(t)
			if !tt.discovery {
				if _, err := c.Discover(ctx); err != nil {
					t.Fatal(err)
				}
				// Now make the action endless on the discovered router.
				h.SetEndless(tt.action, tt.declared)
			}
			var err error
			grew := allocated(func() {
				if tt.discovery {
					_, err = c.Discover(ctx)
				} else {
					err = tt.call(ctx, c)
				}
			})
			t.Logf("allocated %.1f MiB; error: %v", float64(grew)/(1<<20), err)
			if grew > heapBudget {
				t.Errorf("the call allocated %d MiB, want under %d MiB", grew>>20, heapBudget>>20)
			}
			text := ""
			if tt.discovery {
				var nge *noGatewayError
				if !errors.As(err, &nge) || len(nge.Found) != 1 {
					t.Fatalf("Discover() = %v, want a noGatewayError with one candidate", err)
				}
				text = nge.Found[0].Rejected
			} else {
				if !errors.Is(err, ErrAnswerTooLarge) {
					t.Fatalf("error = %v, want ErrAnswerTooLarge", err)
				}
				text = err.Error()
			}
			for _, want := range []string{h.URL, tt.capText} {
				if !strings.Contains(text, want) {
					t.Errorf("error %q does not name %q", text, want)
				}
			}
		})
	}
}

// TestCappedClientKeepsTheRouter checks that an answer over the cap is not
// taken for a router that stopped answering: the client keeps it.
func TestCappedClientKeepsTheRouter(t *testing.T) {
	g := newTestIGD(t, igd2Device, "")
	h := newHostileIGD(t, g)
	h.SetEndless("GetListOfPortMappings", 0)
	c := newTestClient(t, g, func(cfg *Config) { cfg.RootDescURL = h.URL + "/rootDesc.xml" })
	ctx := testCtx(t)
	if _, err := c.ListPortMappings(ctx, TCP, PortRange{First: 1, Last: 65535}); !errors.Is(err, ErrAnswerTooLarge) {
		t.Fatalf("ListPortMappings() = %v, want ErrAnswerTooLarge", err)
	}
	if _, ok := c.current(); !ok {
		t.Error("the router was forgotten after an answer over the cap")
	}
	if ip, err := c.ExternalIP(ctx); err != nil || ip != netip.MustParseAddr("198.51.101.7") {
		t.Errorf("ExternalIP() after the capped answer = %s, %v", ip, err)
	}
}

func TestCapTransportBoundary(t *testing.T) {
	tests := []struct {
		name     string
		size     int64
		declared bool
		wantErr  bool
	}{
		{"at the cap", maxSOAPAnswerSize, false, false},
		{"one byte over", maxSOAPAnswerSize + 1, false, true},
		{"at the cap, declared", maxSOAPAnswerSize, true, false},
		{"one byte over, declared", maxSOAPAnswerSize + 1, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp := &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(strings.Repeat("x", int(tt.size)))), ContentLength: -1}
				if tt.declared {
					resp.ContentLength = tt.size
				}
				return resp, nil
			})
			req, err := http.NewRequestWithContext(withOversizeRecord(testCtx(t)), http.MethodPost, "http://127.0.0.1:5000/ctl/IPConn", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header["SOAPACTION"] = []string{`"` + upnp.ServiceWANIPConnection2 + `#GetExternalIPAddress"`}
			var n int64
			resp, err := capTransport{next: next}.RoundTrip(req)
			if err == nil {
				n, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if gotErr := errors.Is(err, ErrAnswerTooLarge); gotErr != tt.wantErr {
				t.Fatalf("read %d bytes, error %v; want ErrAnswerTooLarge: %v", n, err, tt.wantErr)
			}
			if !tt.wantErr && n != tt.size {
				t.Errorf("read %d bytes, want %d", n, tt.size)
			}
			if tt.wantErr && oversize(req.Context()) == nil {
				t.Error("the answer over the cap was not recorded in the request's context")
			}
		})
	}
}
