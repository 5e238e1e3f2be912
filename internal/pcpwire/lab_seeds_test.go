package pcpwire

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
)

var updateSeeds = flag.Bool("update-seeds", false, "write the datagrams TestLabDecodersReadRealAnswers exchanges with the lab router as fuzz seeds (igd/pcp and fake testdata/fuzz)")

// recorder keeps every datagram a client sends and receives.
type recorder struct {
	mu       sync.Mutex
	sent     [][]byte
	received [][]byte
}

func (r *recorder) add(list *[][]byte, b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*list = append(*list, append([]byte(nil), b...))
}

func (r *recorder) take() (sent, received [][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sent, received = r.sent, r.received
	r.sent, r.received = nil, nil
	return sent, received
}

type recordedConn struct {
	net.Conn
	r *recorder
}

func (c recordedConn) Write(b []byte) (int, error) {
	c.r.add(&c.r.sent, b)
	return c.Conn.Write(b)
}

func (c recordedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.r.add(&c.r.received, b[:n])
	}
	return n, err
}

type recordedPacketConn struct {
	net.PacketConn
	r *recorder
}

func (c recordedPacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, from, err := c.PacketConn.ReadFrom(b)
	if n > 0 {
		c.r.add(&c.r.received, b[:n])
	}
	return n, from, err
}

// TestLabDecodersReadRealAnswers exchanges MAP (granted, refused for a
// nonce that is not the mapping's, deleted), NAT-PMP public address and
// ANNOUNCE messages with miniupnpd 2.3.1 and checks that the decoders read
// each answer as the client must. With -update-seeds it writes the answers
// as seeds of this package's fuzz targets, and the requests as seeds of
// fake's FuzzPCPServerRequest.
func TestLabDecodersReadRealAnswers(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2, PCPAllowThirdParty: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := lab.Nodes[0]
	rec := &recorder{}
	opened := make(chan struct{})
	c, err := NewClient(Config{
		Server: netip.AddrPortFrom(lab.RouterLAN, Port),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := n.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return recordedConn{conn, rec}, nil
		},
		ListenPacket: func(ctx context.Context, network, addr string) (net.PacketConn, error) {
			defer close(opened)
			pc, err := n.ListenPacket(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return recordedPacketConn{pc, rec}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	nonceA, nonceB := [12]byte{0xa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, [12]byte{0xb, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	node1 := lab.Nodes[1].Addr

	type exchange struct {
		name       string
		do         func() error
		wantResult ResultCode
	}
	var answers, requests [][]byte
	for _, e := range []exchange{
		{"map", func() error {
			_, err := c.Map(ctx, MapRequest{Protocol: igd.TCP, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour, Nonce: nonceA})
			return err
		}, Success},
		{"map for another host", func() error {
			_, err := c.Map(ctx, MapRequest{Protocol: igd.UDP, InternalAddr: node1, InternalPort: 30053, ExternalPort: 5353, Lifetime: 2 * time.Minute, Nonce: nonceB, PreferFailure: true})
			return err
		}, Success},
		{"delete with another nonce", func() error { return c.Delete(ctx, igd.TCP, netip.Addr{}, 30080, nonceB) }, NotAuthorized},
		{"delete", func() error { return c.Delete(ctx, igd.TCP, netip.Addr{}, 30080, nonceA) }, Success},
		{"delete again", func() error { return c.Delete(ctx, igd.TCP, netip.Addr{}, 30080, nonceA) }, NoResources},
	} {
		err := e.do()
		var re *ResultError
		if (e.wantResult == Success && err != nil) || (e.wantResult != Success && (!errors.As(err, &re) || re.Code != e.wantResult)) {
			t.Fatalf("%s: %v, want result %v\nminiupnpd log:\n%s", e.name, err, e.wantResult, lab.Log())
		}
		sent, received := rec.take()
		if len(received) == 0 {
			t.Fatalf("%s: no answer recorded", e.name)
		}
		for _, b := range received {
			p := b[headerLen:]
			req := mapMessage{Nonce: [12]byte(p[0:12]), Protocol: p[12], InternalPort: uint16(p[16])<<8 | uint16(p[17])}
			m, ok := decodeMapAnswer(b, req)
			if !ok || m.Result != e.wantResult {
				t.Errorf("%s: decodeMapAnswer(% x) = %+v, %v; want result %v", e.name, b, m, ok, e.wantResult)
			}
		}
		answers, requests = append(answers, received...), append(requests, sent...)
	}

	if _, err := c.ExternalAddr(ctx); err != nil {
		t.Fatal(err)
	}
	_, natpmp := rec.take()
	for _, b := range natpmp {
		if a, ok := decodeNATPMPAddress(b); !ok || a.result != 0 || a.addr != lab.ExternalIP {
			t.Errorf("decodeNATPMPAddress(% x) = %+v, %v; want %s", b, a, ok, lab.ExternalIP)
		}
	}

	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.ListenAnnounce(lctx) }()
	<-opened
	lab.Restart(t)
	select {
	case <-c.Restarts():
	case <-time.After(10 * time.Second):
		t.Fatalf("no ANNOUNCE within 10 s\nminiupnpd log:\n%s", lab.Log())
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_, announces := rec.take()
	for _, b := range announces {
		if _, ok := decodeAnnounce(b); !ok {
			t.Errorf("decodeAnnounce(% x) refused miniupnpd's ANNOUNCE", b)
		}
	}

	if !*updateSeeds {
		return
	}
	writeSeeds(t, "FuzzDecodeMapAnswer", answers, "bool(true)")
	writeSeeds(t, "FuzzDecodeNATPMPAddress", natpmp)
	writeSeeds(t, "FuzzDecodeAnnounce", announces)
	writeSeeds(t, filepath.Join("..", "..", "..", "..", "fake", "testdata", "fuzz", "FuzzPCPServerRequest"), requests, "bool(true)")
}

// writeSeeds writes each datagram as a seed of the fuzz target (a name, or
// a path relative to testdata/fuzz), with the target's further arguments.
func writeSeeds(t *testing.T, target string, datagrams [][]byte, args ...string) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, b := range datagrams {
		if seen[string(b)] {
			continue // a retransmission's answer
		}
		seen[string(b)] = true
		text := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
		for _, a := range args {
			text += a + "\n"
		}
		name := filepath.Join(dir, fmt.Sprintf("miniupnpd-2.3.1-%d", i))
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
