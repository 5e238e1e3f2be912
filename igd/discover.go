package igd

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ccmkit/ccmkit/internal/upnp"
	"github.com/huin/goupnp"
	"github.com/huin/goupnp/dcps/internetgateway2"
)

const (
	// ssdpGroup is the SSDP multicast group and port M-SEARCH goes to.
	ssdpGroup = "239.255.255.250:1900"
	// ssdpResend is how often the search is repeated while no usable router
	// has answered: SSDP is UDP, and a router may miss the first search.
	ssdpResend = time.Second
	// maxIgnored bounds how many answers from hosts other than the accepted
	// router one discovery lists (never probes) among its candidates, so
	// that a LAN full of devices answering every search cannot grow the
	// list without bound; maxIgnoredPerHost bounds them per host, so that
	// one host cannot fill the list.
	maxIgnored        = 16
	maxIgnoredPerHost = 4
	// maxLocationsPerHost bounds the accepted router's locations probed at
	// once. A router answers every search type with the same location, some
	// with one per device version.
	maxLocationsPerHost = 4
	// maxGatewayLocations bounds the distinct locations probed on the
	// accepted router, maxLocationsPerHost at a time, queued beyond: SSDP
	// answers are UDP and any LAN host can send them from the router's
	// address, so a few answers pointing at closed ports on the router must
	// not shut its real answer out, only delay it by one failed fetch each.
	maxGatewayLocations = 64
)

// mSearch returns an SSDP search for st. MX 1 asks devices to answer within
// a second (the smallest the spec allows); miniupnpd answers at once.
func mSearch(st string) []byte {
	return []byte("M-SEARCH * HTTP/1.1\r\n" +
		"HOST: " + ssdpGroup + "\r\n" +
		"MAN: \"ssdp:discover\"\r\n" +
		"MX: 1\r\n" +
		"ST: " + st + "\r\n\r\n")
}

// ssdpAnswer is one unicast answer to a search.
type ssdpAnswer struct {
	location  string
	responder netip.Addr
	server    string // the SERVER header
}

// probed is one candidate service and, when usable, its client.
type probed struct {
	cand Candidate
	conn wanConnection
}

// accepted is the one router SSDP discovery probes: its address and how
// the host knows it. addr is invalid when the host has no default route
// and Config.Router is unset; err then says why.
type accepted struct {
	addr netip.Addr
	// what names it in reasons and errors: "the default gateway 192.0.2.1"
	// or "Config.Router 192.0.2.7".
	what string
	err  error
}

// acceptedRouter returns the router SSDP discovery accepts answers from:
// Config.Router, else the host's IPv4 default gateway. SSDP searches over
// IPv4 only, so an answer is always weighed against the IPv4 default route.
func (c *UPnPClient) acceptedRouter(defGW netip.Addr, gwErr error) accepted {
	if r := c.cfg.Router; r.IsValid() {
		return accepted{addr: r, what: "Config.Router " + r.String()}
	}
	if gwErr != nil {
		return accepted{err: gwErr}
	}
	return accepted{addr: defGW, what: "the default gateway " + defGW.String()}
}

// ignore returns the candidate listed for an answer from a host other than
// the accepted router: never probed, rejected with the reason.
func (a accepted) ignore(ans ssdpAnswer) probed {
	var why string
	if a.addr.IsValid() {
		why = fmt.Sprintf("answered from %s, not %s: not probed (only that router is used unless another is named with Config.RootDescURL or Config.Router)", ans.responder, a.what)
	} else {
		why = fmt.Sprintf("answered from %s: not probed, as this host has no default gateway and no router is named (Config.RootDescURL or Config.Router)", ans.responder)
	}
	return probed{cand: Candidate{Location: ans.location, Addr: ans.responder, Server: ans.server, Rejected: why}}
}

// discover finds the router and chooses its service, bounded by
// DiscoveryTimeout. With Config.RootDescURL it probes that description and
// accepts it wherever it is (the operator named it). Otherwise it searches
// by SSDP and probes only the answers of one router (acceptedRouter): a LAN
// host that merely claims a better service is listed, rejected, and sent no
// request.
func (c *UPnPClient) discover(parent context.Context) (*gateway, error) {
	ctx, cancel := context.WithTimeout(parent, c.cfg.DiscoveryTimeout)
	defer cancel()
	defGW, gwErr := c.cfg.Host.DefaultGateway(ctx)
	if gwErr == nil && !defGW.IsValid() {
		gwErr = errors.New("igd: no IPv4 default route")
	}
	if gwErr != nil {
		defGW = netip.Addr{}
	}
	defGW = defGW.Unmap() // answers' senders are unmapped too

	var found []probed
	var early bool
	how, why := "SSDP search", ""
	var notAccepted error
	if c.cfg.RootDescURL != "" {
		how = "root description " + c.cfg.RootDescURL
		why = "named by Config.RootDescURL"
		found = c.probe(ctx, c.cfg.RootDescURL, netip.Addr{}, "", defGW)
	} else {
		acc := c.acceptedRouter(defGW, gwErr)
		why, notAccepted = acc.what, acc.err
		var err error
		found, early, err = c.search(ctx, acc, defGW)
		if err != nil {
			return nil, err
		}
	}
	gw, ok := choose(found, why)
	if ok && early {
		gw.info.Reason += "; it answered with a service nothing can beat, so discovery did not wait for others"
	}
	if !ok {
		nge := &noGatewayError{Searched: how, Timeout: c.cfg.DiscoveryTimeout}
		for _, p := range found {
			nge.Found = append(nge.Found, p.cand)
		}
		nge.Err = errors.Join(notAccepted, parent.Err())
		return nil, nge
	}
	return gw, nil
}

// search sends SSDP searches for every supported service type and probes the
// answers of acc, the accepted router; answers from other hosts are listed,
// rejected, and never probed. It returns once a usable service has answered
// and the settle window after it has passed (the router may offer several
// locations), or when ctx is done; or at once (early) when the router
// offered a service no answer can beat (best) and none of its locations is
// still being probed, since the choice would be the same after the window.
//
// The settle window does not end the search while locations of the router
// are still queued or being probed: answers spoofed from its address,
// pointing at ports that never answer, would otherwise hold the probes
// until the window closed on its real answer.
func (c *UPnPClient) search(ctx context.Context, acc accepted, defGW netip.Addr) (found []probed, early bool, err error) {
	pc, err := c.cfg.ListenPacket(ctx, "udp4", "0.0.0.0:0")
	if err != nil {
		return nil, false, fmt.Errorf("igd: discover: open SSDP socket: %w", err)
	}
	answers := make(chan ssdpAnswer)
	readerDone := make(chan struct{})
	stopReader := make(chan struct{})
	go func() {
		defer close(readerDone)
		readSSDP(pc, answers, stopReader)
	}()
	// Closing the socket ends a read, closing stopReader a hand-over nobody
	// takes any more; wait for the reader so that it does not outlive the
	// discovery.
	defer func() {
		close(stopReader)
		pc.Close()
		<-readerDone
	}()

	group, err := net.ResolveUDPAddr("udp4", ssdpGroup)
	if err != nil {
		return nil, false, fmt.Errorf("igd: discover: %w", err)
	}
	send := func() error {
		var errs []error
		for _, st := range serviceTypes {
			if _, err := pc.WriteTo(mSearch(st), group); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == len(serviceTypes) {
			return fmt.Errorf("send SSDP search: %w", errors.Join(errs...))
		}
		return nil
	}
	if err := send(); err != nil {
		// No route to the multicast group (no LAN link): nothing to find.
		return nil, false, &noGatewayError{Searched: "SSDP search", Timeout: c.cfg.DiscoveryTimeout, Err: err}
	}
	resend := time.NewTicker(ssdpResend)
	defer resend.Stop()

	probeCtx, cancelProbes := context.WithCancel(ctx)
	defer cancelProbes()
	results := make(chan []probed)
	// The router's locations: active being probed, queue waiting, tried
	// all it was given.
	active, tried := 0, 0
	var queue []ssdpAnswer
	pending := func() bool { return active+len(queue) > 0 }
	seen := map[string]bool{}
	ignoredPerHost := map[netip.Addr]int{}
	ignored := 0
	start := func(a ssdpAnswer) {
		active++
		go func() { results <- c.probe(probeCtx, a.location, a.responder, a.server, defGW) }()
	}
	var settle <-chan time.Time
	settled := false // the window passed while the router was being probed

loop:
	for {
		select {
		case a := <-answers:
			// A router answers once per search type: probe each of its
			// locations once, a few at a time. An answer whose sender is
			// unknown cannot be checked against its LOCATION.
			key := a.location + " " + a.responder.String()
			if seen[key] || !a.responder.IsValid() {
				continue
			}
			if !acc.addr.IsValid() || a.responder != acc.addr {
				if ignoredPerHost[a.responder] < maxIgnoredPerHost && ignored < maxIgnored {
					seen[key] = true
					ignoredPerHost[a.responder]++
					ignored++
					found = append(found, acc.ignore(a))
				}
				continue
			}
			if tried >= maxGatewayLocations {
				continue
			}
			seen[key] = true
			tried++
			if active >= maxLocationsPerHost {
				queue = append(queue, a)
				continue
			}
			start(a)
		case ps := <-results:
			active--
			if len(queue) > 0 {
				start(queue[0])
				queue = queue[1:]
			}
			found = append(found, ps...)
			if !pending() && slices.ContainsFunc(found, func(p probed) bool { return best(p.cand) }) {
				early = true
				break loop
			}
			if settled && !pending() {
				break loop
			}
			if settle == nil && slices.ContainsFunc(ps, func(p probed) bool { return p.cand.Rejected == "" }) {
				t := time.NewTimer(c.cfg.SettleTime)
				defer t.Stop()
				settle = t.C
			}
		case <-resend.C:
			if settle == nil && !settled {
				_ = send() // a failed repeat changes nothing; the first one went out
			}
		case <-settle:
			if pending() {
				settle, settled = nil, true
				continue
			}
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	// Locations still being probed are not waited for: they had the settle
	// window to answer. Their probes end at once and say so.
	cancelProbes()
	for ; active > 0; active-- {
		found = append(found, (<-results)...)
	}
	return found, early, nil
}

// best reports whether c is usable and ranks first on every rule of choose
// but the final tie-break: connected, a public external IP,
// WANIPConnection:2. No other candidate can beat it, except another of the
// router's own with a lower URL (search waits for all of the router's
// locations to be probed).
func best(c Candidate) bool {
	return c.Rejected == "" && c.connected() && IsPublic(c.ExternalIP) && c.ServiceType == serviceTypes[0]
}

// readSSDP reads answers from pc until it is closed, sending each one with a
// LOCATION on answers until stop is closed (then dropping them). Datagrams
// over maxSSDPAnswerSize are ignored.
func readSSDP(pc net.PacketConn, answers chan<- ssdpAnswer, stop <-chan struct{}) {
	// One byte past the cap tells a datagram of the cap from a larger one,
	// which the socket truncates to fit.
	buf := make([]byte, maxSSDPAnswerSize+1)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if n > maxSSDPAnswerSize {
			continue
		}
		a, ok := parseSSDPAnswer(buf[:n], from)
		if !ok {
			continue
		}
		select {
		case answers <- a:
		case <-stop:
			// Nobody takes answers any more: drop it and read on until
			// the socket is closed, the one way the reader ends.
		}
	}
}

func parseSSDPAnswer(b []byte, from net.Addr) (ssdpAnswer, bool) {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
	if err != nil {
		return ssdpAnswer{}, false
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusOK || loc == "" {
		return ssdpAnswer{}, false
	}
	a := ssdpAnswer{location: loc, server: resp.Header.Get("Server")}
	if ap, err := netip.ParseAddrPort(from.String()); err == nil {
		a.responder = ap.Addr().Unmap()
	}
	return a, true
}

// probe fetches the root description at location and asks each supported
// connection service for its status and external IP. When responder is valid
// (an SSDP answer), the location's host must be the responder's own address,
// written as an IP literal: an answer must not send this host to fetch URLs
// elsewhere, nor through a name it would have to resolve. ssdpServer is the
// answer's SERVER header, used when the description's HTTP answer names no
// server.
func (c *UPnPClient) probe(ctx context.Context, location string, responder netip.Addr, ssdpServer string, defGW netip.Addr) []probed {
	reject := func(why string, args ...any) []probed {
		return []probed{{cand: Candidate{Location: location, Addr: responder, Rejected: fmt.Sprintf(why, args...)}}}
	}
	loc, err := url.Parse(location)
	if err != nil || (loc.Scheme != "http" && loc.Scheme != "https") || loc.Host == "" {
		return reject("location is not an absolute http URL")
	}
	if responder.IsValid() {
		if h, err := netip.ParseAddr(loc.Hostname()); err != nil || h.Unmap() != responder {
			return reject("location is not on the answering host %s", responder)
		}
	}
	root, server, err := c.fetchRoot(ctx, loc)
	if err != nil {
		return reject("%v", err)
	}
	server = cmp.Or(server, ssdpServer)
	var out []probed
	ipv6Firewall := len(root.Device.FindService(serviceIPv6Firewall)) > 0
	for _, st := range serviceTypes {
		for _, srv := range root.Device.FindService(st) {
			p := c.probeService(ctx, root, loc, srv, responder, defGW)
			p.cand.Server = server
			p.cand.IPv6Firewall = ipv6Firewall
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return reject("%s (%s) has no WANIPConnection:2, WANIPConnection:1 or WANPPPConnection:1 service",
			root.Device.FriendlyName, root.Device.DeviceType)
	}
	return out
}

// probeService asks one service for its status and external IP.
func (c *UPnPClient) probeService(ctx context.Context, root *goupnp.RootDevice, loc *url.URL, srv *goupnp.Service, responder, defGW netip.Addr) probed {
	cand := Candidate{
		Location:     loc.String(),
		FriendlyName: root.Device.FriendlyName,
		ServiceType:  srv.ServiceType,
	}
	if !srv.ControlURL.Ok {
		cand.Rejected = fmt.Sprintf("bad control URL %q", srv.ControlURL.Str)
		return probed{cand: cand}
	}
	cand.ControlURL = srv.ControlURL.URL.String()
	if a, err := netip.ParseAddr(srv.ControlURL.URL.Hostname()); err == nil {
		cand.Addr = a.Unmap()
	}
	if responder.IsValid() && cand.Addr != responder {
		// Like its LOCATION, an answer's control URL (URLBase or an absolute
		// controlURL in the description) must not send this host's calls to
		// another host, which would then pass for the router.
		cand.Rejected = fmt.Sprintf("control URL %s is not on the answering host %s", cand.ControlURL, responder)
		return probed{cand: cand}
	}
	cand.OnDefaultGateway = defGW.IsValid() && cand.Addr == defGW
	conn := newConn(root, loc, srv, c.cfg.HTTPClient)

	status, err := probeCall(ctx, c.cfg.CallTimeout, "GetStatusInfo", func(ctx context.Context) (string, error) {
		s, _, _, err := conn.GetStatusInfoCtx(ctx)
		return s, err
	})
	var ue *UPnPError
	switch {
	case errors.As(err, &ue):
		// Some routers do not implement GetStatusInfo; the status stays
		// unknown and ranks below "Connected".
	case err != nil:
		cand.Rejected = rejectReason(ctx, err)
		return probed{cand: cand}
	}
	cand.Status = status
	ext, err := probeCall(ctx, c.cfg.CallTimeout, "GetExternalIPAddress", conn.GetExternalIPAddressCtx)
	if err != nil {
		cand.Rejected = rejectReason(ctx, err)
		return probed{cand: cand}
	}
	extIP, extErr := parseExternalIP(ext)
	cand.ExternalIP = extIP
	switch {
	case status != "" && status != "Connected":
		cand.Rejected = fmt.Sprintf("WAN connection is %q, not Connected", status)
	case extErr != nil:
		cand.Rejected = extErr.Error()
	}
	return probed{cand: cand, conn: conn}
}

func rejectReason(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return fmt.Sprintf("no answer before discovery ended: %v", err)
	}
	return err.Error()
}

func probeCall(ctx context.Context, timeout time.Duration, action string, fn func(context.Context) (string, error)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx = withOversizeRecord(ctx)
	s, err := fn(ctx)
	if err != nil {
		err, _ = callError(ctx, action, err)
	}
	return s, err
}

// fetchRoot fetches and parses a root description with the configured HTTP
// client (goupnp's DeviceByURL would use its global client). server is the
// answer's Server header.
func (c *UPnPClient) fetchRoot(ctx context.Context, loc *url.URL) (root *goupnp.RootDevice, server string, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc.String(), nil)
	if err != nil {
		return nil, "", fmt.Errorf("fetch description: %w", err)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			return nil, "", fmt.Errorf("fetch description: %w (%v)", ctxErr, err)
		}
		return nil, "", fmt.Errorf("fetch description: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("fetch description: HTTP %s", resp.Status)
	}
	root, err = upnp.ParseRoot(resp.Body, loc) // the body is capped by the client's transport
	if err != nil {
		return nil, "", err
	}
	return root, resp.Header.Get("Server"), nil
}

// newConn builds goupnp's generated client for srv, sending through hc.
func newConn(root *goupnp.RootDevice, loc *url.URL, srv *goupnp.Service, hc *http.Client) wanConnection {
	sc := upnp.ServiceClient(root, loc, srv, hc)
	switch srv.ServiceType {
	case upnp.ServiceWANIPConnection2:
		return &internetgateway2.WANIPConnection2{ServiceClient: sc}
	case upnp.ServiceWANIPConnection1:
		return &internetgateway2.WANIPConnection1{ServiceClient: sc}
	default:
		return &internetgateway2.WANPPPConnection1{ServiceClient: sc}
	}
}

// choose picks the best usable candidate among the services of the one
// accepted router (why says which, and why it was accepted): connected over
// unknown status, public external IP over non-public, then the newer service
// type; remaining ties go to the lowest location, so the choice never
// depends on which location answered first.
func choose(found []probed, why string) (*gateway, bool) {
	var usable []probed
	for _, p := range found {
		if p.cand.Rejected == "" {
			usable = append(usable, p)
		}
	}
	if len(usable) == 0 {
		return nil, false
	}
	slices.SortStableFunc(usable, func(a, b probed) int {
		return cmp.Or(
			boolRank(a.cand.connected(), b.cand.connected()),
			boolRank(IsPublic(a.cand.ExternalIP), IsPublic(b.cand.ExternalIP)),
			cmp.Compare(slices.Index(serviceTypes, a.cand.ServiceType), slices.Index(serviceTypes, b.cand.ServiceType)),
			strings.Compare(a.cand.Location, b.cand.Location),
			strings.Compare(a.cand.ControlURL, b.cand.ControlURL),
		)
	})
	best := usable[0]
	all := make([]Candidate, len(found))
	for i, p := range found {
		all[i] = p.cand
	}
	slices.SortStableFunc(all, func(a, b Candidate) int {
		return cmp.Or(strings.Compare(a.Location, b.Location), strings.Compare(a.ControlURL, b.ControlURL))
	})
	return &gateway{
		conn: best.conn,
		info: Gateway{
			Candidate:        best.cand,
			PublicExternalIP: IsPublic(best.cand.ExternalIP),
			GuardedListing:   crashesOnLongLists(best.cand.Server),
			Accepted:         why,
			Reason:           why + "; " + reason(best.cand, len(usable)),
			Candidates:       all,
			DiscoveredAt:     time.Now(),
		},
	}, true
}

// boolRank orders true before false.
func boolRank(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

func reason(c Candidate, usable int) string {
	var parts []string
	if c.connected() {
		parts = append(parts, "connected")
	} else {
		parts = append(parts, "connection status unknown")
	}
	if IsPublic(c.ExternalIP) {
		parts = append(parts, "public external IP")
	} else {
		parts = append(parts, "external IP not public")
	}
	if c.OnDefaultGateway {
		parts = append(parts, "on the default gateway")
	} else {
		parts = append(parts, "not the default gateway")
	}
	parts = append(parts, shortService(c.ServiceType))
	return fmt.Sprintf("best of %d usable: %s", usable, strings.Join(parts, ", "))
}

// shortService turns "urn:schemas-upnp-org:service:WANIPConnection:2" into
// "WANIPConnection:2".
func shortService(st string) string {
	if st == "" {
		return "device"
	}
	return strings.TrimPrefix(st, "urn:schemas-upnp-org:service:")
}
