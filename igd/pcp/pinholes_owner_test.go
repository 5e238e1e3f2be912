package pcp_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
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

// A pinhole whose MAP answer is lost (or comes after the client's first
// retransmission) still closes: the router made it on the first MAP, and
// the retransmitted MAP must not renew it in place, which on a router that
// then drops its nonce (miniupnpd 2.3.1, as the fake models it) refuses
// every close until its lease ends.
func TestPinholeWhoseMapAnswerIsLostStillCloses(t *testing.T) {
	var lost atomic.Bool
	s := pinholeServer(t, fake.PCPConfig{AllowThirdParty: true, OnAnswer: func(call fake.PCPCall, answer []byte) []byte {
		if call.Lifetime > 0 && lost.CompareAndSwap(false, true) {
			return nil // the first MAP's answer is lost
		}
		return answer
	}})
	c, err := pcp.NewClient(pcp.Config{Server: s.Addr(), CallTimeout: time.Second}) // the lost answer costs a call
	if err != nil {
		t.Fatal(err)
	}
	p, err := pcp.NewPinholes(pcp.PinholesConfig{PCP: c, Secret: backendSecret})
	if err != nil {
		t.Fatal(err)
	}
	ph := pinhole.Pinhole{InternalClient: nodeGUA, InternalPort: 8443, Protocol: igd.TCP, Lease: time.Hour}
	if err := p.OpenPinhole(pctx(t), ph); err != nil {
		t.Logf("OpenPinhole with its MAP answer lost: %v", err) // either way, it must close
	}
	if err := p.ClosePinhole(pctx(t), ph); err != nil {
		t.Errorf("ClosePinhole after an open whose MAP answer was lost = %v, want nil", err)
	}
	if got := open(s); len(got) != 0 {
		t.Errorf("open pinholes after ClosePinhole: %v", got)
	}
}
