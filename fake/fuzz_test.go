package fake

import (
	"bytes"
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
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
