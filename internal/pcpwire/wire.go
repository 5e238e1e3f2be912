package pcpwire

import (
	"encoding/binary"
	"net/netip"
)

// Wire format of RFC 6887, IPv4 over IPv4-mapped IPv6 fields only.
const (
	version = 2

	opAnnounce  = 0
	opMap       = 1
	responseBit = 0x80

	optThirdParty    = 1
	optPreferFailure = 2

	headerLen     = 24 // request and response common header
	mapPayloadLen = 36
	mapLen        = headerLen + mapPayloadLen
	maxMessageLen = 1100 // RFC 6887 §7

	protoTCP = 6
	protoUDP = 17
)

// mapMessage is a MAP request, or the part of a MAP response the client
// reads, in wire terms.
type mapMessage struct {
	// Request header: Lifetime and ClientAddr. Response header: Lifetime,
	// Result and Epoch.
	Lifetime   uint32
	ClientAddr netip.Addr // request only
	Result     ResultCode // response only
	Epoch      uint32     // response only

	Nonce        [12]byte
	Protocol     uint8
	InternalPort uint16
	ExternalPort uint16     // suggested (request) or assigned (response)
	ExternalAddr netip.Addr // suggested (request) or assigned (response)

	// Options, request only.
	ThirdParty    netip.Addr // valid: send THIRD_PARTY with this address
	PreferFailure bool
}

// putAddr writes a as the 16-byte field PCP uses: IPv4-mapped for IPv4, and
// the all-zeros IPv4-mapped address (::ffff:0.0.0.0) for the zero Addr.
func putAddr(b []byte, a netip.Addr) {
	if !a.IsValid() {
		a = netip.IPv4Unspecified()
	}
	s := a.As16() // IPv4 comes back IPv4-mapped
	copy(b, s[:])
}

// getAddr reads a 16-byte address field, unmapping IPv4-mapped addresses.
func getAddr(b []byte) netip.Addr {
	return netip.AddrFrom16([16]byte(b[:16])).Unmap()
}

// encodeMap returns the bytes of a MAP request.
func encodeMap(m mapMessage) []byte {
	n := mapLen
	if m.ThirdParty.IsValid() {
		n += 4 + 16
	}
	if m.PreferFailure {
		n += 4
	}
	b := make([]byte, n)
	b[0] = version
	b[1] = opMap
	binary.BigEndian.PutUint32(b[4:], m.Lifetime)
	putAddr(b[8:24], m.ClientAddr)
	p := b[headerLen:]
	copy(p[0:12], m.Nonce[:])
	p[12] = m.Protocol
	binary.BigEndian.PutUint16(p[16:], m.InternalPort)
	binary.BigEndian.PutUint16(p[18:], m.ExternalPort)
	putAddr(p[20:36], m.ExternalAddr)
	o := b[mapLen:]
	if m.ThirdParty.IsValid() {
		o[0] = optThirdParty
		binary.BigEndian.PutUint16(o[2:], 16)
		putAddr(o[4:20], m.ThirdParty)
		o = o[20:]
	}
	if m.PreferFailure {
		o[0] = optPreferFailure
	}
	return b
}

// decodeMapAnswer reads b as the answer to the MAP request req. It reports
// false for anything that is not that answer: a short, oversized or
// misaligned message, another version, a request, another opcode, or a
// nonce, protocol or internal port that is not req's. Options in the answer
// are not read.
func decodeMapAnswer(b []byte, req mapMessage) (mapMessage, bool) {
	if len(b) < mapLen || len(b) > maxMessageLen || len(b)%4 != 0 ||
		b[0] != version || b[1] != responseBit|opMap {
		return mapMessage{}, false
	}
	p := b[headerLen:]
	m := mapMessage{
		Lifetime:     binary.BigEndian.Uint32(b[4:]),
		Result:       ResultCode(b[3]),
		Epoch:        binary.BigEndian.Uint32(b[8:]),
		Nonce:        [12]byte(p[0:12]),
		Protocol:     p[12],
		InternalPort: binary.BigEndian.Uint16(p[16:]),
		ExternalPort: binary.BigEndian.Uint16(p[18:]),
		ExternalAddr: getAddr(p[20:36]),
	}
	if m.Nonce != req.Nonce || m.Protocol != req.Protocol || m.InternalPort != req.InternalPort {
		return mapMessage{}, false
	}
	return m, true
}

// isUnsupportedVersion reports whether b is a refusal of PCP version 2 by a
// server that speaks only an older version: a NAT-PMP server (version 0)
// answers any request it cannot read with opcode 128+op and result 1 in
// bytes 2-3 (RFC 6886 §3.5), a PCP server of an older version with
// UNSUPP_VERSION (1) in byte 3 (RFC 6887 §9). Such an answer carries no
// nonce, so it cannot be matched to a request; it is the one answer the
// client accepts without.
func isUnsupportedVersion(b []byte) bool {
	return len(b) >= 4 && b[0] < version && b[1] == responseBit|opMap && b[3] == byte(UnsuppVersion)
}

// decodeAnnounce reads b as an ANNOUNCE response (solicited or not) with
// result SUCCESS and returns its epoch.
func decodeAnnounce(b []byte) (epoch uint32, ok bool) {
	if len(b) < headerLen || len(b) > maxMessageLen || len(b)%4 != 0 ||
		b[0] != version || b[1] != responseBit|opAnnounce || ResultCode(b[3]) != Success {
		return 0, false
	}
	return binary.BigEndian.Uint32(b[8:]), true
}

// encodeAnnounceRequest returns the bytes of an ANNOUNCE request from
// client (RFC 6887 §14.1): a header, lifetime 0, no payload.
func encodeAnnounceRequest(client netip.Addr) []byte {
	b := make([]byte, headerLen)
	b[0] = version
	b[1] = opAnnounce
	putAddr(b[8:24], client)
	return b
}

// decodeAnnounceAnswer reads b as the answer to an ANNOUNCE request: its
// epoch and result, or a NAT-PMP server's refusal of the version
// (UNSUPP_VERSION, no epoch). It reports false for anything else.
func decodeAnnounceAnswer(b []byte) (epoch uint32, result ResultCode, ok bool) {
	switch {
	case len(b) >= 4 && b[0] < version && b[1] == responseBit|opAnnounce && b[3] == byte(UnsuppVersion):
		return 0, UnsuppVersion, true
	case len(b) < headerLen || len(b) > maxMessageLen || len(b)%4 != 0 ||
		b[0] != version || b[1] != responseBit|opAnnounce:
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(b[8:]), ResultCode(b[3]), true
}
