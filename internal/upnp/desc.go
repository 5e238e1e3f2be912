package upnp

import (
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/huin/goupnp"
	"github.com/huin/goupnp/soap"
)

// ParseRoot parses a root description fetched from loc, and resolves its
// URLs against its URLBase or, without one, loc. It reads UTF-8 and the
// one other encoding routers are seen to declare, ISO-8859-1. Its errors
// start "parse description: ".
func ParseRoot(r io.Reader, loc *url.URL) (*goupnp.RootDevice, error) {
	root := new(goupnp.RootDevice)
	dec := xml.NewDecoder(r)
	dec.DefaultSpace = goupnp.DeviceXMLNamespace
	dec.CharsetReader = charsetReader
	if err := dec.Decode(root); err != nil {
		return nil, fmt.Errorf("parse description: %w", err)
	}
	base := loc
	if root.URLBaseStr != "" {
		b, err := url.Parse(root.URLBaseStr)
		if err != nil {
			return nil, fmt.Errorf("parse description: URLBase %q: %w", root.URLBaseStr, err)
		}
		base = b
	}
	root.SetURLBase(base)
	return root, nil
}

// charsetReader accepts the one non-UTF-8 encoding routers are seen to
// declare, ISO-8859-1 (Latin-1), whose bytes are the first 256 code points.
func charsetReader(label string, r io.Reader) (io.Reader, error) {
	switch strings.ToLower(label) {
	case "iso-8859-1", "iso8859-1", "latin1", "latin-1", "us-ascii", "ascii":
		b, err := io.ReadAll(r)
		if err != nil {
			return nil, err
		}
		runes := make([]rune, len(b))
		for i, c := range b {
			runes[i] = rune(c)
		}
		return strings.NewReader(string(runes)), nil
	}
	return nil, fmt.Errorf("unsupported charset %q", label)
}

// ServiceClient is goupnp's client for srv, a service of root (fetched
// from loc), sending its SOAP requests through hc: the base of goupnp's
// generated clients (internetgateway2.WANIPConnection2{ServiceClient: ...}).
func ServiceClient(root *goupnp.RootDevice, loc *url.URL, srv *goupnp.Service, hc *http.Client) goupnp.ServiceClient {
	return goupnp.ServiceClient{
		SOAPClient: &soap.SOAPClient{EndpointURL: srv.ControlURL.URL, HTTPClient: *hc},
		RootDevice: root,
		Location:   loc,
		Service:    srv,
	}
}
