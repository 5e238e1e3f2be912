package loadbalancer

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// A port held by a PCP mapping is reported without the mapping's nonce: the
// description miniupnpd stores for it is the nonce, which lets whoever reads
// it delete or replace the mapping, and the error reaches the Service's
// events. Other descriptions are quoted whole.
func TestPortErrorRedactsPCPNonce(t *testing.T) {
	nonce := [12]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8}
	k := igd.Key{Protocol: igd.TCP, ExternalPort: 8080}
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		desc := pcpwire.Description(nonce, order)
		holder := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: netip.MustParseAddr("192.168.1.7"), InternalPort: 80, Description: desc}
		msg := (&PortError{Service: "ns/web", Key: k, Holder: &holder, Err: ErrPortInUse}).Error()
		if hex := strings.TrimPrefix(desc, "PCP MAP "); strings.Contains(msg, hex) || strings.Contains(msg, hex[:8]) {
			t.Errorf("error quotes the nonce %s: %s", hex, msg)
		}
		if !strings.Contains(msg, "PCP") || !strings.Contains(msg, "192.168.1.7:80") {
			t.Errorf("error no longer says who holds the port: %s", msg)
		}
	}
	holder := igd.Mapping{InternalClient: netip.MustParseAddr("192.168.1.7"), InternalPort: 80, Description: "Transmission at 51413"}
	if msg := (&PortError{Service: "ns/web", Key: k, Holder: &holder, Err: ErrPortInUse}).Error(); !strings.Contains(msg, `"Transmission at 51413"`) {
		t.Errorf("a plain description is not quoted: %s", msg)
	}
}
