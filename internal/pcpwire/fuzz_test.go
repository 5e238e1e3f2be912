package pcpwire

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
)

// The decoders of what any LAN host can send this client: MAP answers,
// NAT-PMP public address answers and ANNOUNCEs, read without a socket. The
// seed corpora in testdata/fuzz/<target> hold answers of miniupnpd 2.3.1
// captured in the lab (go test -run TestLabDecodersReadRealAnswers
// ./igd/pcp/ -args -update-seeds writes them, as root); explore with
// go test -run '^$' -fuzz=FuzzDecodeMapAnswer ./igd/pcp/.

// mapAnswerSeed is a MAP answer of miniupnpd 2.3.1 to the request of
// TestEncodeMap's first case: SUCCESS, lifetime 3600, epoch 1234,
// 198.51.101.7:8080.
const mapAnswerSeed = "0281000000000e10000004d2000000000000000000000000" +
	"0102030405060708090a0b0c060000007580" + "1f9000000000000000000000ffffc6336507"

// FuzzDecodeMapAnswer checks that no datagram makes the MAP answer decoder
// panic, that it accepts exactly the well-formed MAP answers to the request
// (the request is made to match the datagram's nonce, protocol and port
// when it says so), reading each field from its place, and that a refusal
// of the version is never taken for an answer.
func FuzzDecodeMapAnswer(f *testing.F) {
	f.Add(mustHex(f, mapAnswerSeed), true)
	f.Add(mustHex(f, mapAnswerSeed), false)
	f.Add([]byte{0, 129, 0, 1, 0, 0, 0, 0}, true) // NAT-PMP's refusal of version 2
	f.Add([]byte{1, 129, 0, 1}, true)             // PCP version 1's
	f.Fuzz(func(t *testing.T, b []byte, matching bool) {
		req := mapMessage{Nonce: [12]byte{1}, Protocol: protoTCP, InternalPort: 1}
		if matching && len(b) >= mapLen {
			p := b[headerLen:]
			req.Nonce, req.Protocol, req.InternalPort = [12]byte(p[0:12]), p[12], binary.BigEndian.Uint16(p[16:])
		}
		m, ok := decodeMapAnswer(b, req)
		unsupp := isUnsupportedVersion(b)
		if ok && unsupp {
			t.Fatalf("% x is both an answer and a refusal of the version", b)
		}
		wellFormed := len(b) >= mapLen && len(b) <= maxMessageLen && len(b)%4 == 0 &&
			b[0] == version && b[1] == responseBit|opMap
		if !wellFormed {
			if ok {
				t.Fatalf("accepted % x, which is no well-formed MAP answer", b)
			}
			return
		}
		p := b[headerLen:]
		matches := [12]byte(p[0:12]) == req.Nonce && p[12] == req.Protocol && binary.BigEndian.Uint16(p[16:]) == req.InternalPort
		if ok != matches {
			t.Fatalf("decodeMapAnswer(% x) ok = %v, want %v (the request's nonce, protocol and port match: %v)", b, ok, matches, matches)
		}
		if !ok {
			return
		}
		if m.Result != ResultCode(b[3]) || m.Lifetime != binary.BigEndian.Uint32(b[4:]) || m.Epoch != binary.BigEndian.Uint32(b[8:]) ||
			m.ExternalPort != binary.BigEndian.Uint16(p[18:]) || !m.ExternalAddr.IsValid() || m.ExternalAddr.As16() != netipFrom16(p[20:36]) {
			t.Fatalf("decodeMapAnswer(% x) = %+v: a field is not read from its place", b, m)
		}
		_ = (&ResultError{Op: "map", Code: m.Result}).Error() // any code has a name
	})
}

// FuzzDecodeNATPMPAddress checks that no datagram makes the NAT-PMP public
// address decoder panic and that it accepts exactly the answers of version
// 0, opcode 128, at least 12 bytes, with an IPv4 address.
func FuzzDecodeNATPMPAddress(f *testing.F) {
	f.Add([]byte{0, 128, 0, 0, 0, 0, 0x04, 0xd2, 198, 51, 101, 7})
	f.Add([]byte{0, 128, 0, 3, 0, 0, 0x04, 0xd2, 0, 0, 0, 0}) // no external address yet
	f.Add([]byte{2, 128, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, ok := decodeNATPMPAddress(b)
		want := len(b) >= 12 && b[0] == 0 && b[1] == 128
		if ok != want {
			t.Fatalf("decodeNATPMPAddress(% x) ok = %v, want %v", b, ok, want)
		}
		if !ok {
			return
		}
		if !a.addr.Is4() || a.addr.As4() != [4]byte(b[8:12]) || a.epoch != binary.BigEndian.Uint32(b[4:]) || a.result != binary.BigEndian.Uint16(b[2:]) {
			t.Fatalf("decodeNATPMPAddress(% x) = %+v: a field is not read from its place", b, a)
		}
		_ = (&ResultError{Op: "external address", Code: ResultCode(a.result)}).Error()
	})
}

// FuzzDecodeAnnounce checks that no datagram makes the ANNOUNCE decoder
// panic and that it accepts exactly the well-formed SUCCESS ANNOUNCE
// responses, reading the epoch from its place.
func FuzzDecodeAnnounce(f *testing.F) {
	f.Add(mustHex(f, "02800000 00000000 000004d2 000000000000000000000000"))
	f.Add(mustHex(f, "02800001 00000000 000004d2 000000000000000000000000")) // not SUCCESS
	f.Add(mustHex(f, "02000000 00000000 00000000 000000000000000000000000")) // a request
	f.Fuzz(func(t *testing.T, b []byte) {
		epoch, ok := decodeAnnounce(b)
		want := len(b) >= headerLen && len(b) <= maxMessageLen && len(b)%4 == 0 &&
			b[0] == version && b[1] == responseBit|opAnnounce && b[3] == byte(Success)
		if ok != want {
			t.Fatalf("decodeAnnounce(% x) ok = %v, want %v", b, ok, want)
		}
		if ok && epoch != binary.BigEndian.Uint32(b[8:]) {
			t.Fatalf("decodeAnnounce(% x) epoch = %d, want bytes 8-11", b, epoch)
		}
	})
}

func netipFrom16(b []byte) [16]byte { return [16]byte(b) }

// mustHex decodes hex with spaces in it.
func mustHex(f *testing.F, s string) []byte {
	f.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		f.Fatal(err)
	}
	return b
}
