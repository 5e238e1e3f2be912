package pinhole

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/huin/goupnp"
	"github.com/huin/goupnp/dcps/internetgateway2"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// ssdpGroup is the link-local SSDP multicast group (UPnP Device
// Architecture 1.1, IPv6). Routers listen on it on their LAN interfaces.
const ssdpGroup = "ff02::c"

// maxAnswer caps a description or SOAP answer: a root description is a few
// kilobytes, and a router that streams more must not exhaust memory.
const maxAnswer = 1 << 20

// searchRepeat is how often a search is sent again while no router has
// answered: multicast over Wi-Fi is lossy.
const searchRepeat = time.Second

// find locates the router's WANIPv6FirewallControl:1 service: from
// Config.RootDescURL, or from the first router that answers an SSDP search
// over IPv6 with a description that has it.
func (c *UPnPClient) find(ctx context.Context) (firewallControl, error) {
	if c.cfg.RootDescURL != "" {
		svc, err := c.probe(ctx, c.cfg.RootDescURL)
		if err != nil {
			return nil, fmt.Errorf("router at %s: %w", c.cfg.RootDescURL, err)
		}
		return svc, nil
	}
	return c.search(ctx)
}

// search sends M-SEARCH for the service to ff02::c from LocalAddr and probes
// each new LOCATION answered until one serves it or DiscoveryTimeout passes.
func (c *UPnPClient) search(ctx context.Context) (firewallControl, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DiscoveryTimeout)
	defer cancel()
	pc, err := c.cfg.ListenPacket(ctx, "udp6", netip.AddrPortFrom(c.cfg.LocalAddr, 0).String())
	if err != nil {
		return nil, fmt.Errorf("SSDP search: %w", err)
	}
	defer pc.Close()
	dst := &net.UDPAddr{IP: net.ParseIP(ssdpGroup), Port: 1900, Zone: c.cfg.Interface}
	msg := []byte("M-SEARCH * HTTP/1.1\r\nHOST: [FF02::C]:1900\r\nMAN: \"ssdp:discover\"\r\nMX: 1\r\nST: " +
		internetgateway2.URN_WANIPv6FirewallControl_1 + "\r\n\r\n")
	stop := context.AfterFunc(ctx, func() { pc.SetReadDeadline(time.Now()) })
	defer stop()

	var rejected []error
	seen := map[string]bool{}
	buf := make([]byte, 2048)
	next := time.Now()
	for ctx.Err() == nil {
		if !time.Now().Before(next) {
			if _, err := pc.WriteTo(msg, dst); err != nil {
				return nil, fmt.Errorf("SSDP search to [%s%%%s]:1900: %w", ssdpGroup, c.cfg.Interface, err)
			}
			next = time.Now().Add(searchRepeat)
		}
		dl := next
		if d, ok := ctx.Deadline(); ok && d.Before(dl) {
			dl = d
		}
		pc.SetReadDeadline(dl)
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			continue // the deadline: send again, or ctx is done
		}
		loc, ok := ssdpLocation(buf[:n])
		if !ok || seen[loc] {
			continue
		}
		seen[loc] = true
		svc, err := c.probe(ctx, loc)
		if err == nil {
			return svc, nil
		}
		rejected = append(rejected, fmt.Errorf("%s: %w", loc, err))
	}
	if err := context.Cause(ctx); ctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("SSDP search: %w", err)
	}
	return nil, fmt.Errorf("no router answered an SSDP search for %s on [%s%%%s] within %v: %w",
		internetgateway2.URN_WANIPv6FirewallControl_1, ssdpGroup, c.cfg.Interface, c.cfg.DiscoveryTimeout,
		errors.Join(append([]error{igd.ErrNoGateway}, rejected...)...))
}

// ssdpLocation returns the LOCATION header of an SSDP answer for the
// service.
func ssdpLocation(b []byte) (string, bool) {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
	if err != nil {
		return "", false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.EqualFold(resp.Header.Get("ST"), internetgateway2.URN_WANIPv6FirewallControl_1) {
		return "", false
	}
	loc := resp.Header.Get("LOCATION")
	return loc, loc != ""
}

// probe fetches the root description at loc and returns a client for its
// WANIPv6FirewallControl:1 service. The description and the control URL
// must be on IPv6 addresses.
func (c *UPnPClient) probe(ctx context.Context, loc string) (firewallControl, error) {
	u, err := ipv6URL(loc)
	if err != nil {
		return nil, fmt.Errorf("description: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("fetch description: %w", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch description: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch description: HTTP %s", resp.Status)
	}
	root, err := upnp.ParseRoot(resp.Body, u)
	if err != nil {
		return nil, err
	}
	var srv *goupnp.Service
	root.Device.VisitServices(func(s *goupnp.Service) {
		if srv == nil && s.ServiceType == internetgateway2.URN_WANIPv6FirewallControl_1 {
			srv = s
		}
	})
	if srv == nil {
		return nil, fmt.Errorf("description has no %s service: %w", internetgateway2.URN_WANIPv6FirewallControl_1, igd.ErrNotSupported)
	}
	if _, err := ipv6URL(srv.ControlURL.URL.String()); err != nil {
		return nil, fmt.Errorf("control URL: %w", err)
	}
	return &internetgateway2.WANIPv6FirewallControl1{ServiceClient: upnp.ServiceClient(root, u, srv, c.hc)}, nil
}

// newHTTPClient returns the client every request goes through: no proxy,
// no keep-alive (routers close every connection), no redirect, answers
// capped at maxAnswer, and connections only from LocalAddr.
func newHTTPClient(cfg Config) *http.Client {
	return &http.Client{
		Transport: capped{&http.Transport{
			Proxy:             nil, // a LAN router is never reached through a proxy
			DialContext:       fromLocal(cfg.LocalAddr, cfg.DialContext),
			DisableKeepAlives: true,
		}},
		CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			return fmt.Errorf("router redirected to %s: not followed", req.URL)
		},
	}
}

// fromLocal wraps dial so that a connection from any address but local is
// closed and refused before a byte is sent: the router would take the
// request for another host's.
func fromLocal(local netip.Addr, dial func(ctx context.Context, network, address string) (net.Conn, error)) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		conn, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		ap, err := netip.ParseAddrPort(conn.LocalAddr().String())
		if err != nil || ap.Addr().WithZone("") != local {
			conn.Close()
			return nil, fmt.Errorf("connection to %s left from %s, not from Config.LocalAddr %s: the router would refuse pinholes for it", address, conn.LocalAddr(), local)
		}
		return conn, nil
	}
}

// capped caps every answer body at maxAnswer bytes; reading past it fails.
type capped struct{ rt http.RoundTripper }

func (c capped) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = http.MaxBytesReader(nil, resp.Body, maxAnswer)
	return resp, nil
}
