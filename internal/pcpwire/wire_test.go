package pcpwire

import (
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// unhex decodes hex with spaces and newlines in it.
func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var testNonce = [12]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}

func TestEncodeMap(t *testing.T) {
	for _, tt := range []struct {
		name string
		m    mapMessage
		want string
	}{
		{
			name: "map for this host",
			m: mapMessage{
				Lifetime: 3600, ClientAddr: netip.MustParseAddr("192.0.2.10"),
				Nonce: testNonce, Protocol: protoTCP, InternalPort: 30080, ExternalPort: 8080,
			},
			want: `02 01 0000 00000e10 00000000000000000000ffff c000020a
			       0102030405060708090a0b0c 06 000000 7580 1f90 00000000000000000000ffff 00000000`,
		},
		{
			name: "third party and prefer failure",
			m: mapMessage{
				Lifetime: 120, ClientAddr: netip.MustParseAddr("192.0.2.10"),
				Nonce: testNonce, Protocol: protoUDP, InternalPort: 30053, ExternalPort: 53,
				ThirdParty: netip.MustParseAddr("192.0.2.11"), PreferFailure: true,
			},
			want: `02 01 0000 00000078 00000000000000000000ffff c000020a
			       0102030405060708090a0b0c 11 000000 7565 0035 00000000000000000000ffff 00000000
			       01 00 0010 00000000000000000000ffff c000020b
			       02 00 0000`,
		},
		{
			name: "delete",
			m: mapMessage{
				ClientAddr: netip.MustParseAddr("192.0.2.10"),
				Nonce:      testNonce, Protocol: protoTCP, InternalPort: 30080,
			},
			want: `02 01 0000 00000000 00000000000000000000ffff c000020a
			       0102030405060708090a0b0c 06 000000 7580 0000 00000000000000000000ffff 00000000`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := encodeMap(tt.m)
			if diff := cmp.Diff(unhex(t, tt.want), got); diff != "" {
				t.Errorf("encodeMap (-want +got):\n%s", diff)
			}
		})
	}
}

// answer is a MAP SUCCESS answer to a TCP request for internal port 30080
// with testNonce: lifetime 3600, epoch 1000, 198.51.101.7:8080.
const answer = `02 81 00 00 00000e10 000003e8 000000000000000000000000
	0102030405060708090a0b0c 06 000000 7580 1f90 00000000000000000000ffff c6336507`

func TestDecodeMapAnswer(t *testing.T) {
	req := mapMessage{Nonce: testNonce, Protocol: protoTCP, InternalPort: 30080}
	good := unhex(t, answer)
	want := mapMessage{
		Lifetime: 3600, Result: Success, Epoch: 1000, Nonce: testNonce, Protocol: protoTCP,
		InternalPort: 30080, ExternalPort: 8080, ExternalAddr: netip.MustParseAddr("198.51.101.7"),
	}
	got, ok := decodeMapAnswer(good, req)
	if !ok {
		t.Fatal("decodeMapAnswer rejected a good answer")
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("decodeMapAnswer (-want +got):\n%s", diff)
	}

	withOption := append(append([]byte{}, good...), unhex(t, "80 00 0000")...)
	if _, ok := decodeMapAnswer(withOption, req); !ok {
		t.Error("decodeMapAnswer rejected an answer with an option")
	}
	refused := append([]byte{}, good...)
	refused[3] = byte(NotAuthorized)
	if got, ok := decodeMapAnswer(refused, req); !ok || got.Result != NotAuthorized {
		t.Errorf("decodeMapAnswer(NOT_AUTHORIZED answer) = %v, %v; want result NOT_AUTHORIZED", got.Result, ok)
	}

	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte{}, good...)) }
	for _, tt := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"header only", good[:headerLen]},
		{"truncated payload", good[:mapLen-4]},
		{"not a multiple of 4", append(append([]byte{}, good...), 0)},
		{"too long", make([]byte, maxMessageLen+4)},
		{"version 1", edit(func(b []byte) []byte { b[0] = 1; return b })},
		{"version 3", edit(func(b []byte) []byte { b[0] = 3; return b })},
		{"request (R bit clear)", edit(func(b []byte) []byte { b[1] = opMap; return b })},
		{"ANNOUNCE", edit(func(b []byte) []byte { b[1] = responseBit | opAnnounce; return b })},
		{"PEER", edit(func(b []byte) []byte { b[1] = responseBit | 2; return b })},
		{"other nonce", edit(func(b []byte) []byte { b[headerLen+11] ^= 1; return b })},
		{"other protocol", edit(func(b []byte) []byte { b[headerLen+12] = protoUDP; return b })},
		{"other internal port", edit(func(b []byte) []byte { binary.BigEndian.PutUint16(b[headerLen+16:], 30081); return b })},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := decodeMapAnswer(tt.b, req); ok {
				t.Errorf("decodeMapAnswer accepted it: %+v", got)
			}
		})
	}
}

func TestIsUnsupportedVersion(t *testing.T) {
	for _, tt := range []struct {
		name string
		b    string
		want bool
	}{
		{"NAT-PMP server (RFC 6886 §3.5)", "00 81 0001 00000000", true},
		{"PCP version 1 server", "01 81 00 01 00000000 00000000 000000000000000000000000", true},
		{"version 2 answer", "02 81 00 01 00000000 00000000 000000000000000000000000", false},
		{"NAT-PMP other result", "00 81 0002 00000000", false},
		{"too short", "00 81 00", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := isUnsupportedVersion(unhex(t, tt.b)); got != tt.want {
				t.Errorf("isUnsupportedVersion = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDecodeAnnounce(t *testing.T) {
	for _, tt := range []struct {
		name      string
		b         string
		wantEpoch uint32
		wantOK    bool
	}{
		{"miniupnpd start", "02 80 00 00 00000000 0000002a 000000000000000000000000", 42, true},
		{"error result", "02 80 00 08 0000001e 0000002a 000000000000000000000000", 0, false},
		{"request", "02 00 00 00 00000000 0000002a 000000000000000000000000", 0, false},
		{"MAP answer", "02 81 00 00 00000000 0000002a 000000000000000000000000", 0, false},
		{"version 1", "01 80 00 00 00000000 0000002a 000000000000000000000000", 0, false},
		{"short", "02 80 00 00 00000000 0000002a", 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			epoch, ok := decodeAnnounce(unhex(t, tt.b))
			if epoch != tt.wantEpoch || ok != tt.wantOK {
				t.Errorf("decodeAnnounce = %d, %v; want %d, %v", epoch, ok, tt.wantEpoch, tt.wantOK)
			}
		})
	}
}
