package fake

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// PCP lifetime bounds of miniupnpd 2.3.1 (min_lifetime and max_lifetime):
// the defaults, and the largest values it accepts for each.
const (
	DefaultPCPMinLifetime = 120 * time.Second
	DefaultPCPMaxLifetime = 86400 * time.Second
)

// PCPConfig configures a PCPServer. The zero value is miniupnpd 2.3.1 as the
// lab runs it, on a new Router, on 127.0.0.1: THIRD_PARTY refused, the
// default lifetime bounds, an epoch that restarts with the daemon.
type PCPConfig struct {
	// Router holds the table the server maps into, shared with its UPnP
	// Clients and Servers: a PCP mapping reads through UPnP with the
	// description PCPDescription(nonce). Its clock runs leases and the
	// epoch. Nil means NewRouter(RouterConfig{}).
	Router *Router
	// Conn is the socket the server answers on. Nil means a new UDP socket
	// on 127.0.0.1 at a free port; an IPv6 socket (on [::1], say) serves
	// IPv6 pinholes. The server owns it: Close closes it.
	Conn net.PacketConn
	// AllowThirdParty is miniupnpd's pcp_allow_thirdparty=yes: a MAP may
	// carry THIRD_PARTY. False refuses it with UNSUPP_OPTION.
	AllowThirdParty bool
	// MinLifetime and MaxLifetime bound the lifetimes the server grants
	// (whole seconds). Zero means DefaultPCPMinLifetime and
	// DefaultPCPMaxLifetime.
	MinLifetime, MaxLifetime time.Duration
	// SystemUptime is miniupnpd's system_uptime=yes, as the lab runs it:
	// the epoch counts from the machine's boot, so Restart keeps it
	// counting and only Reboot resets it. False: the epoch counts from the
	// daemon's start and Restart resets it too.
	SystemUptime bool
	// AnnounceTo receives the unsolicited ANNOUNCE the server sends when it
	// restarts or reboots, in addition to the sockets ListenAnnounce opened
	// (miniupnpd sends it to 224.0.0.1:5350).
	AnnounceTo []netip.AddrPort
	// OnAnswer, when set, sees each answer after the request was carried
	// out and before it is sent, and returns what to send instead: nil
	// drops it (a lost datagram: the mapping is made or deleted all the
	// same), other bytes replace it. It is called from the server's
	// goroutine, one request at a time, with no lock held. Nil sends every
	// answer as is.
	OnAnswer func(call PCPCall, answer []byte) []byte
}

// PCPCall is one request a PCPServer answered, as recorded in its log.
type PCPCall struct {
	// From is the sender.
	From netip.AddrPort
	// Version and Opcode are the request's (the R bit cleared).
	Version, Opcode uint8
	// Lifetime is the lifetime the request asked for, in seconds.
	Lifetime uint32
	// Nonce, Protocol, InternalPort and ExternalPort are a MAP request's.
	Nonce        [12]byte
	Protocol     uint8
	InternalPort uint16
	ExternalPort uint16
	// ThirdParty is the THIRD_PARTY option's address, if any.
	ThirdParty netip.Addr
	// PreferFailure reports the PREFER_FAILURE option.
	PreferFailure bool
	// Result is the answer's result code (RFC 6887 §7.4; it prints as the
	// RFC's name, such as NOT_AUTHORIZED); for a MAP, AssignedPort is the
	// answer's external port.
	Result       pcpwire.ResultCode
	AssignedPort uint16
}

// PCPServer is a PCP (RFC 6887) server with miniupnpd 2.3.1's semantics,
// over a Router's table: MAP with its nonce guarding delete, THIRD_PARTY,
// PREFER_FAILURE as the CHECK_PORTINUSE build treats it, lifetimes clamped,
// an epoch in every answer and an ANNOUNCE on restart. See the package
// documentation for what it does not model. It is safe for concurrent use.
type PCPServer struct {
	cfg    PCPConfig // defaults filled in; read-only
	router *Router
	conn   net.PacketConn
	addr   netip.AddrPort
	done   chan struct{} // closed when serve returns

	// mu guards every field below it.
	mu        sync.Mutex
	origin    time.Time // epoch 0, on the router's clock
	listeners map[netip.AddrPort]bool
	calls     []PCPCall
	closed    bool
}

// NewPCPServer starts a server configured by cfg, answering on cfg.Conn (or
// a new socket on 127.0.0.1). Close stops it.
func NewPCPServer(cfg PCPConfig) (*PCPServer, error) {
	if cfg.Router == nil {
		cfg.Router = NewRouter(RouterConfig{})
	}
	if cfg.MinLifetime == 0 {
		cfg.MinLifetime = DefaultPCPMinLifetime
	}
	if cfg.MaxLifetime == 0 {
		cfg.MaxLifetime = DefaultPCPMaxLifetime
	}
	if cfg.MinLifetime < 0 || cfg.MaxLifetime < cfg.MinLifetime {
		return nil, fmt.Errorf("fake: PCPConfig lifetimes [%v, %v]: want 0 <= MinLifetime <= MaxLifetime", cfg.MinLifetime, cfg.MaxLifetime)
	}
	cfg.AnnounceTo = slices.Clone(cfg.AnnounceTo)
	conn := cfg.Conn
	if conn == nil {
		var err error
		if conn, err = net.ListenPacket("udp4", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("fake: PCP server: %w", err)
		}
	}
	addr, err := netip.ParseAddrPort(conn.LocalAddr().String())
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("fake: PCP server address: %w", err)
	}
	s := &PCPServer{
		cfg:       cfg,
		router:    cfg.Router,
		conn:      conn,
		addr:      netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()),
		done:      make(chan struct{}),
		origin:    cfg.Router.clock.Now(),
		listeners: make(map[netip.AddrPort]bool),
	}
	go s.serve()
	return s, nil
}

// Addr is the address the server answers on, for pcp.Config.Server.
func (s *PCPServer) Addr() netip.AddrPort { return s.addr }

// Router returns the table the server maps into.
func (s *PCPServer) Router() *Router { return s.router }

// Close stops the server and closes its socket. It is idempotent.
func (s *PCPServer) Close() error {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if already {
		<-s.done
		return nil
	}
	err := s.conn.Close()
	<-s.done
	return err
}

// Epoch returns the Epoch Time the server answers now, in seconds.
func (s *PCPServer) Epoch() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epochLocked()
}

func (s *PCPServer) epochLocked() uint32 {
	return uint32(s.router.clock.Since(s.origin) / time.Second)
}

// Restart simulates a restart of the daemon: the table is kept, the epoch
// starts again from 0 unless PCPConfig.SystemUptime is set, and the server
// sends an unsolicited ANNOUNCE (see ListenAnnounce and
// PCPConfig.AnnounceTo), as miniupnpd does when it starts.
func (s *PCPServer) Restart() {
	s.mu.Lock()
	if !s.cfg.SystemUptime {
		s.origin = s.router.clock.Now()
	}
	s.mu.Unlock()
	s.announce()
}

// Reboot simulates a reboot of the router: Router.Reboot wipes the table,
// the epoch starts again from 0 (the machine's uptime does too), and the
// server sends an unsolicited ANNOUNCE.
func (s *PCPServer) Reboot() {
	s.router.Reboot()
	s.mu.Lock()
	s.origin = s.router.clock.Now()
	s.mu.Unlock()
	s.announce()
}

// ExternalAddressChanged sets the router's external address (see
// Router.SetExternalIP) and, as miniupnpd does (PCPPublicAddressChanged),
// resets the epoch and sends an unsolicited ANNOUNCE.
func (s *PCPServer) ExternalAddressChanged(a netip.Addr) {
	s.router.SetExternalIP(a)
	s.mu.Lock()
	s.origin = s.router.clock.Now()
	s.mu.Unlock()
	s.announce()
}

// ListenAnnounce opens a UDP socket on 127.0.0.1 that receives the server's
// unsolicited ANNOUNCE messages until it is closed, whatever network and
// addr say: it fits pcp.Config.ListenPacket, standing in for the multicast
// group 224.0.0.1:5350 on loopback.
func (s *PCPServer) ListenAnnounce(ctx context.Context, network, addr string) (net.PacketConn, error) {
	var lc net.ListenConfig
	pc, err := lc.ListenPacket(ctx, "udp4", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fake: PCP announce listener: %w", err)
	}
	ap, err := netip.ParseAddrPort(pc.LocalAddr().String())
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("fake: PCP announce listener: %w", err)
	}
	s.mu.Lock()
	s.listeners[ap] = true
	s.mu.Unlock()
	return &announceConn{PacketConn: pc, unsubscribe: func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.listeners, ap)
	}}, nil
}

// announceConn unsubscribes its address from the server when closed.
type announceConn struct {
	net.PacketConn
	once        sync.Once
	unsubscribe func()
}

func (c *announceConn) Close() error {
	c.once.Do(c.unsubscribe)
	return c.PacketConn.Close()
}

// Calls returns a copy of the log of the requests the server answered,
// oldest first.
func (s *PCPServer) Calls() []PCPCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// announce sends an unsolicited ANNOUNCE to every destination.
func (s *PCPServer) announce() {
	s.mu.Lock()
	msg := make([]byte, pcpHeaderLen)
	msg[0] = pcpVersion
	msg[1] = pcpResponseBit | pcpOpAnnounce
	binary.BigEndian.PutUint32(msg[8:], s.epochLocked())
	dsts := slices.Clone(s.cfg.AnnounceTo)
	for ap := range s.listeners {
		dsts = append(dsts, ap)
	}
	s.mu.Unlock()
	for _, d := range dsts {
		// A destination that is gone is not the server's concern: the
		// daemon sends and forgets.
		s.conn.WriteTo(msg, net.UDPAddrFromAddrPort(d))
	}
}

// PCPDescription is the description miniupnpd 2.3.1 gives a PCP MAP
// mapping, which UPnP reads back: "PCP MAP " and the nonce as three 32-bit
// words, each printed in hex in the router's byte order (pcpserver.c copies
// the nonce's bytes into uint32s and prints them with %08x). The lab's
// router and this fake are little-endian, so each group of four bytes
// reads reversed: nonce 01 02 03 04 ... gives "PCP MAP 04030201...".
func PCPDescription(nonce [12]byte) string {
	return pcpwire.Description(nonce, binary.LittleEndian)
}

// serve answers requests until the socket is closed or fails.
func (s *PCPServer) serve() {
	defer close(s.done)
	buf := make([]byte, 2048)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return // closed, or a socket that no longer works
		}
		src, err := netip.ParseAddrPort(from.String())
		if err != nil {
			continue
		}
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		answer, call := s.handle(buf[:n], src)
		if answer == nil {
			continue
		}
		s.mu.Lock()
		s.calls = append(s.calls, call)
		s.mu.Unlock()
		if s.cfg.OnAnswer != nil {
			if answer = s.cfg.OnAnswer(call, answer); answer == nil {
				continue
			}
		}
		s.conn.WriteTo(answer, from)
	}
}

// Wire constants of RFC 6887, written out here rather than shared with
// igd/pcp: the fake decodes requests itself, so that a bug in the client's
// codec cannot hide behind the same bug in the server's.
const (
	pcpVersion     = 2
	pcpResponseBit = 0x80
	pcpOpAnnounce  = 0
	pcpOpMap       = 1
	pcpHeaderLen   = 24
	pcpMapLen      = 36
	pcpMaxLen      = 1100

	pcpOptThirdParty    = 1
	pcpOptPreferFailure = 2
	pcpOptFilter        = 3

	pcpProtoTCP = 6
	pcpProtoUDP = 17
)

// pcpRequest is what the server read of a request, as miniupnpd's
// pcp_info_t holds it.
type pcpRequest struct {
	version, opcode uint8
	result          pcpwire.ResultCode
	lifetime        uint32 // clamped
	clientIP        [16]byte
	nonce           [12]byte
	protocol        uint8
	intPort         uint16
	extPort         uint16
	extIP           *[16]byte // nil: not set
	thirdParty      *[16]byte
	preferFailure   bool
	fw              bool // an IPv6 internal address: a pinhole, no NAT
}

// handle answers one datagram from src as miniupnpd 2.3.1's
// ProcessIncomingPCPPacket does. A nil answer means no answer.
func (s *PCPServer) handle(b []byte, src netip.AddrPort) ([]byte, PCPCall) {
	call := PCPCall{From: src}
	if len(b) < 2 || b[1]&pcpResponseBit != 0 {
		return nil, call // too short to read, or a response: dropped
	}
	if b[0] == 0 && b[1] == 0 {
		// NAT-PMP's public address request (natpmp.c): the external
		// address, or result 3 (network failure) while there is none.
		call.Version, call.Opcode = 0, 0
		resp := []byte{0, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		s.mu.Lock()
		binary.BigEndian.PutUint32(resp[4:], s.epochLocked())
		s.mu.Unlock()
		if ext := s.router.ExternalIP(); ext.Is4() && !ext.IsUnspecified() {
			copy(resp[8:], ext.AsSlice())
		} else {
			resp[3] = 3
		}
		return resp, call
	}
	if len(b) < 3 || b[0] == 0 || b[0] == 1 {
		// Too short for PCP; the other NAT-PMP requests and PCP version 1 are not modelled.
		return nil, call
	}
	// The answer is the request rewritten in place, as miniupnpd does it:
	// at least a header long, rounded up to a multiple of 4.
	n := max(pcpHeaderLen, (len(b)+3)&^3)
	resp := make([]byte, n)
	copy(resp, b)
	var req pcpRequest
	s.process(b, src, &req)
	call.Version, call.Opcode, call.Lifetime = req.version, req.opcode, binary.BigEndian.Uint32(pad(b, 8)[4:8])
	call.Nonce, call.Protocol, call.InternalPort, call.ExternalPort = req.nonce, req.protocol, req.intPort, req.extPort
	if req.thirdParty != nil {
		call.ThirdParty = netip.AddrFrom16(*req.thirdParty).Unmap()
	}
	call.PreferFailure = req.preferFailure
	call.Result = req.result

	// createPCPResponse.
	resp[0] = req.version
	if req.result == pcpwire.UnsuppVersion {
		resp[0] = pcpVersion
	}
	resp[1] = req.opcode | pcpResponseBit
	resp[2] = 0
	resp[3] = byte(req.result)
	switch req.result {
	case pcpwire.Success:
		binary.BigEndian.PutUint32(resp[4:], req.lifetime)
	case pcpwire.NetworkFailure, pcpwire.NoResources, pcpwire.UserExQuota:
		binary.BigEndian.PutUint32(resp[4:], 30)
	default:
		binary.BigEndian.PutUint32(resp[4:], 0)
	}
	s.mu.Lock()
	binary.BigEndian.PutUint32(resp[8:], s.epochLocked())
	s.mu.Unlock()
	clear(resp[12:24])
	if resp[0] == pcpVersion && resp[1] == pcpResponseBit|pcpOpMap && len(resp) >= pcpHeaderLen+pcpMapLen {
		p := resp[pcpHeaderLen:]
		binary.BigEndian.PutUint16(p[16:], req.intPort)
		binary.BigEndian.PutUint16(p[18:], req.extPort)
		if req.extIP != nil {
			copy(p[20:36], req.extIP[:])
		}
		call.AssignedPort = req.extPort
	}
	return resp, call
}

// pad returns b extended with zeros to at least n bytes.
func pad(b []byte, n int) []byte {
	if len(b) >= n {
		return b
	}
	return append(slices.Clone(b), make([]byte, n-len(b))...)
}

// process is processPCPRequest: it reads b into req and carries out a
// valid MAP, leaving the result code in req.result.
func (s *PCPServer) process(b []byte, src netip.AddrPort, req *pcpRequest) {
	if len(b) < pcpHeaderLen || len(b) > pcpMaxLen || len(b)%4 != 0 {
		// The header is not read: the answer says version 0, opcode 0.
		req.result = pcpwire.MalformedRequest
		return
	}
	// parseCommonRequestHeader.
	req.version = b[0]
	req.opcode = b[1] & 0x7f
	req.lifetime = binary.BigEndian.Uint32(b[4:])
	req.clientIP = [16]byte(b[8:24])
	if req.version > pcpVersion {
		req.result = pcpwire.UnsuppVersion
		return
	}
	lo, hi := uint32(s.cfg.MinLifetime/time.Second), uint32(s.cfg.MaxLifetime/time.Second)
	if req.lifetime > hi {
		req.lifetime = hi
	}
	if req.lifetime < lo && req.lifetime != 0 {
		req.lifetime = lo
	}
	switch req.opcode {
	case pcpOpAnnounce:
		return // SUCCESS, with the epoch
	case pcpOpMap:
	default:
		req.result = pcpwire.UnsuppOpcode
		return
	}
	if len(b) < pcpHeaderLen+pcpMapLen {
		req.result = pcpwire.MalformedRequest
		return
	}
	p := b[pcpHeaderLen:]
	req.nonce = [12]byte(p[0:12])
	req.protocol = p[12]
	req.intPort = binary.BigEndian.Uint16(p[16:])
	req.extPort = binary.BigEndian.Uint16(p[18:])
	ext := [16]byte(p[20:36])
	req.extIP = &ext
	s.parseOptions(b[pcpHeaderLen+pcpMapLen:], req)
	if !s.validate(src, req) {
		return
	}
	s.router.pcpMap(req)
}

// parseOptions is parsePCPOptions: it reads the options of a MAP request,
// setting req.result on the first (or last) problem as miniupnpd does.
func (s *PCPServer) parseOptions(o []byte, req *pcpRequest) {
	for len(o) > 0 {
		if len(o) < 4 {
			req.result = pcpwire.MalformedOption
			return
		}
		n := int(binary.BigEndian.Uint16(o[2:])) + 4
		if len(o) < n {
			req.result = pcpwire.MalformedOption
			return
		}
		switch code := o[0]; code {
		case pcpOptThirdParty:
			if n != 20 || req.thirdParty != nil {
				req.result = pcpwire.MalformedOption
				return
			}
			a := [16]byte(o[4:20])
			req.thirdParty = &a
		case pcpOptPreferFailure:
			if n != 4 {
				req.result = pcpwire.MalformedOption
				return
			}
			if req.preferFailure {
				req.result = pcpwire.MalformedOption
			}
			req.preferFailure = true
		case pcpOptFilter:
			if n != 24 {
				req.result = pcpwire.MalformedOption
				return
			}
		default:
			if code < 128 {
				// Mandatory to understand; parsing goes on, as in
				// miniupnpd.
				req.result = pcpwire.UnsuppOption
			}
		}
		o = o[n:]
	}
}

// validate is ValidatePCPMsg and CheckExternalAddress: it reports whether
// the MAP is to be carried out, setting req.result when it is refused.
func (s *PCPServer) validate(src netip.AddrPort, req *pcpRequest) bool {
	if req.result != pcpwire.Success {
		return false
	}
	sender := src.Addr().Unmap().As16() // IPv4-mapped
	if req.clientIP != sender {
		req.result = pcpwire.AddressMismatch
		return false
	}
	if req.thirdParty != nil {
		if !s.cfg.AllowThirdParty {
			req.result = pcpwire.UnsuppOption
			return false
		}
		if *req.thirdParty == sender {
			req.result = pcpwire.MalformedRequest
			return false
		}
		if tp := netip.AddrFrom16(*req.thirdParty).Unmap(); tp.IsUnspecified() || tp.IsMulticast() {
			// Not a host's address: no mapping can point at it.
			req.result = pcpwire.MalformedOption
			return false
		}
	}
	if req.protocol == 0 && req.intPort != 0 {
		req.result = pcpwire.MalformedRequest
		return false
	}
	if req.preferFailure && unspecified(*req.extIP) && req.extPort == 0 {
		req.result = pcpwire.MalformedOption
		return false
	}
	mapped := req.clientIP
	if req.thirdParty != nil {
		mapped = *req.thirdParty
	}
	real := s.router.ExternalIP().As16()
	if req.fw = !netip.AddrFrom16(mapped).Is4In6(); req.fw {
		// An IPv6 pinhole (CheckExternalAddress's is_fw): the external
		// address is the internal one.
		real = mapped
	}
	switch {
	case unspecified(*req.extIP):
		req.extIP = &real
	case *req.extIP != real && req.preferFailure:
		req.result = pcpwire.CannotProvideExternal
		return false
	case *req.extIP != real:
		req.extIP = &real
	}
	return true
}

// unspecified reports whether a is :: or ::ffff:0.0.0.0.
func unspecified(a [16]byte) bool {
	ad := netip.AddrFrom16(a)
	return ad.IsUnspecified() || ad.Unmap().IsUnspecified()
}

// pcpMap carries out a validated MAP request on the table: a delete when
// the lifetime is 0 (DeletePCPMap), else a create (CreatePCPMap_NAT).
func (r *Router) pcpMap(req *pcpRequest) {
	mapped := netip.AddrFrom16(req.clientIP).Unmap()
	if req.thirdParty != nil {
		mapped = netip.AddrFrom16(*req.thirdParty).Unmap()
	}
	desc := PCPDescription(req.nonce)
	var proto igd.Protocol
	switch req.protocol {
	case pcpProtoTCP:
		proto = igd.TCP
	case pcpProtoUDP:
		proto = igd.UDP
	default:
		// Other protocols (and 0, all protocols) are not modelled.
		req.result = pcpwire.UnsuppProtocol
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	if req.fw {
		r.expirePinholesLocked(now)
		p := pinhole.Pinhole{InternalClient: mapped, InternalPort: req.intPort, Protocol: proto}
		if req.lifetime == 0 {
			req.result = r.pcpClosePinholeLocked(p, desc)
			return
		}
		p.Lease = time.Duration(req.lifetime) * time.Second
		req.result = r.pcpOpenPinholeLocked(now, p, req, desc)
		return
	}
	r.expireLocked(now)
	if req.lifetime == 0 {
		req.result = r.pcpDeleteLocked(proto, mapped, req.intPort, desc)
		return
	}
	req.result = r.pcpCreateLocked(now, proto, mapped, req, desc)
}

// pcpDeleteLocked is DeletePCPMap: the first mapping, newest first, to
// mapped:intPort (any port when intPort is 0) of proto is deleted if its
// description is desc, else the answer is NOT_AUTHORIZED; no such mapping
// is NO_RESOURCES.
func (r *Router) pcpDeleteLocked(proto igd.Protocol, mapped netip.Addr, intPort uint16, desc string) pcpwire.ResultCode {
	es := make([]*entry, 0, len(r.table))
	for _, e := range r.table {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(b.seq, a.seq) })
	for _, e := range es {
		if e.m.Protocol != proto || e.m.InternalClient != mapped || (intPort != 0 && e.m.InternalPort != intPort) {
			continue
		}
		if e.m.Description != desc {
			return pcpwire.NotAuthorized
		}
		delete(r.table, e.m.Key())
		return pcpwire.Success
	}
	return pcpwire.NoResources
}

// pcpCreateLocked is CreatePCPMap_NAT as Debian's build (CHECK_PORTINUSE,
// netfilter) runs it: starting at the suggested external port (the internal
// port when none is suggested), a port the permission lines refuse is
// answered CANNOT_PROVIDE_EXTERNAL with PREFER_FAILURE and skipped without;
// a port whose mapping goes elsewhere is in use and skipped, whatever
// PREFER_FAILURE says; a mapping to the same internal address and port is
// replaced, whatever its nonce; a free port is taken. When the lines allow
// no port the answer is NOT_AUTHORIZED, when every allowed port is in use
// NO_RESOURCES.
func (r *Router) pcpCreateLocked(now time.Time, proto igd.Protocol, mapped netip.Addr, req *pcpRequest, desc string) pcpwire.ResultCode {
	if req.extPort == 0 {
		req.extPort = req.intPort
	}
	if req.extPort == 0 {
		return pcpwire.MalformedRequest
	}
	first := req.extPort
	anyAllowed := false
	for {
		if r.permitted(req.extPort, mapped, req.intPort) {
			anyAllowed = true
			e, ok := r.table[igd.Key{Protocol: proto, ExternalPort: req.extPort}]
			if !ok || (e.m.InternalClient == mapped && e.m.InternalPort == req.intPort) {
				break
			}
			// port_in_use: redirected somewhere else.
		} else if req.preferFailure {
			return pcpwire.CannotProvideExternal
		}
		req.extPort++
		if req.extPort == 0 {
			req.extPort = 1
		}
		if req.extPort == first {
			if !anyAllowed {
				return pcpwire.NotAuthorized
			}
			return pcpwire.NoResources
		}
	}
	k := igd.Key{Protocol: proto, ExternalPort: req.extPort}
	if _, exists := r.table[k]; !exists && r.cfg.Capacity > 0 && len(r.table) >= r.cfg.Capacity {
		return pcpwire.NoResources
	}
	lease := time.Duration(req.lifetime) * time.Second
	r.seq++
	r.table[k] = &entry{
		m: igd.Mapping{
			Protocol: proto, ExternalPort: req.extPort,
			InternalClient: mapped, InternalPort: req.intPort,
			Description: desc, Lease: lease, Enabled: true,
		},
		expires: now.Add(lease),
		seq:     r.seq,
	}
	return pcpwire.Success
}

// pcpOpenPinholeLocked is CreatePCPMap_FW of miniupnpd 2.3.1 with the
// nftables backend: a pinhole already open to p's address, port and
// protocol is renewed to p.Lease whatever nonce it holds, loses its
// description (and so its nonce: update_pinhole drops it) and the answer
// keeps the suggested external port as it came; otherwise a new pinhole
// opens, with desc, and the external port is the internal one.
func (r *Router) pcpOpenPinholeLocked(now time.Time, p pinhole.Pinhole, req *pcpRequest, desc string) pcpwire.ResultCode {
	if id, e := r.pinholeAtLocked(p); e != nil {
		r.pinholes[id] = &pinholeEntry{p: p, expires: now.Add(p.Lease)}
		return pcpwire.Success
	}
	r.lastPinholeID++
	r.pinholes[r.lastPinholeID] = &pinholeEntry{p: p, expires: now.Add(p.Lease), desc: desc}
	req.extPort = p.InternalPort
	return pcpwire.Success
}

// pcpClosePinholeLocked is DeletePCPMap's firewall path: the pinhole to
// p's address, port and protocol is closed if its description is desc,
// else NOT_AUTHORIZED; when there is none the answer is SUCCESS (2.3.1
// returns before it sets an error).
func (r *Router) pcpClosePinholeLocked(p pinhole.Pinhole, desc string) pcpwire.ResultCode {
	id, e := r.pinholeAtLocked(p)
	switch {
	case e == nil:
		return pcpwire.Success
	case e.desc != desc:
		return pcpwire.NotAuthorized
	}
	delete(r.pinholes, id)
	return pcpwire.Success
}

// pinholeAtLocked returns the pinhole to p's address, port and protocol,
// if any.
func (r *Router) pinholeAtLocked(p pinhole.Pinhole) (uint16, *pinholeEntry) {
	for id, e := range r.pinholes {
		if e.p.InternalClient == p.InternalClient && e.p.InternalPort == p.InternalPort && e.p.Protocol == p.Protocol {
			return id, e
		}
	}
	return 0, nil
}
