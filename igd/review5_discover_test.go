package igd

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// review5: the gateway's answers past four are queued, but the settle
// window (SettleTime after the first usable answer) does not wait for the
// queue. Four answers spoofed from the gateway's address whose LOCATIONs
// are on the gateway but hang (a TCP port that accepts and never answers
// an HTTP request: dnsmasq's DNS-over-TCP on port 53 reads "GE" as a
// 18245-byte length and waits) hold the four probe slots for CallTimeout;
// a rogue IGD elsewhere answers, settles, and is chosen before the real
// gateway's answer, queued fifth, is ever probed. review4's attack with
// closed ports is fixed; with slow ports it is not.
func TestReview5HangingGatewayLocationsOutlastTheSettleWindow(t *testing.T) {
	const gwIP = "127.0.0.3"
	ln, err := net.Listen("tcp", gwIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accept, never answer
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	n := &ssdpNet{t: t}
	gw := newSSDPDevice(t, igd2Device, gwIP, 50*time.Millisecond) // the real router answers a little after the spoofs
	rogue := newSSDPDevice(t, igd2Device, "127.0.0.2", 0)
	spoof := newSSDPDevice(t, igd2Device, gwIP, 0) // "from" the gateway's address
	var locs []string
	for i := range maxLocationsPerHost {
		locs = append(locs, fmt.Sprintf("http://%s/rootDesc%d.xml", ln.Addr(), i))
	}
	spoof.SetAnswers(locs, 0)
	wantGatewayChosen(t, n, gwIP, gw, rogue, spoof, 300*time.Millisecond)
}
