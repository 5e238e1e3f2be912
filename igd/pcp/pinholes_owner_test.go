package pcp_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// A pinhole the router holds under another nonce (another cluster's, or a
// LAN host's own) answered the delete with NOT_AUTHORIZED: fresh proof it
// is not ours. OpenPinhole then refuses (igd.ErrNotAuthorized) rather
// than renew it with a MAP, which on a router that drops the nonce of a
// pinhole renewed in place (miniupnpd 2.3.1, as the fake models it)
// leaves its owner unable to close it, and extends its lease to ours.
func TestOpenPinholeHeldUnderAnotherNonceIsRefusedAndLeftToItsOwner(t *testing.T) {
	s := pinholeServer(t, fake.PCPConfig{AllowThirdParty: true})
	ph := pinhole.Pinhole{InternalClient: nodeGUA, InternalPort: 8443, Protocol: igd.TCP, Lease: time.Hour}
	theirs := newPinholes(t, s, otherSecret)
	if err := theirs.OpenPinhole(pctx(t), ph); err != nil {
		t.Fatal(err)
	}
	ours := ph
	ours.Lease = 24 * time.Hour
	if err := newPinholes(t, s, backendSecret).OpenPinhole(pctx(t), ours); !errors.Is(err, igd.ErrNotAuthorized) {
		t.Errorf("OpenPinhole of a pinhole held under another nonce = %v, want an error matching igd.ErrNotAuthorized", err)
	}
	if err := theirs.ClosePinhole(pctx(t), ph); err != nil {
		t.Errorf("its owner's ClosePinhole after ours = %v, want nil", err)
	}
}
