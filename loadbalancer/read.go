package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// reading is what a read found at a Service's keys, and when it was sent: a
// lease the router reports counts down from then at the latest.
type reading struct {
	at       time.Time
	mappings map[igd.Key]igd.Mapping
}

// read returns what the router holds at o's keys, the proof every write
// rests on: a listing per protocol where the client can list, else one get a
// key (readRouter); on a blind client, what this process wrote (recall).
func (lb *LoadBalancer) read(ctx context.Context, o owner, keys []igd.Key) (reading, error) {
	return lb.mode.read(ctx, o, keys)
}

// readRouter reads the router at keys: through l where the client lists
// (nil: it does not), else one get a key. A listing the router refuses (it
// lacks the action, or rejects its arguments: 402, 501) falls back to the
// gets; only a failure to reach the router fails the read.
func (lb *LoadBalancer) readRouter(ctx context.Context, l igd.Lister, keys []igd.Key) (reading, error) {
	r := reading{at: lb.cfg.Clock.Now(), mappings: make(map[igd.Key]igd.Mapping, len(keys))}
	if len(keys) == 0 {
		return r, nil
	}
	keys = slices.Compact(slices.SortedFunc(slices.Values(keys), compareKeys)) // list needs them sorted
	if l != nil {
		err := lb.list(ctx, l, keys, r.mappings)
		if err == nil {
			return r, nil
		}
		if !listRefused(err) {
			return reading{}, err
		}
		klog.FromContext(ctx).V(4).Info("Router refused a listing; reading keys one by one", "err", err)
		clear(r.mappings)
	}
	for _, k := range keys {
		m, err := lb.cfg.Client.GetPortMapping(ctx, k.Protocol, k.ExternalPort)
		switch {
		case errors.Is(err, igd.ErrNoSuchEntry):
		case err != nil:
			return reading{}, fmt.Errorf("loadbalancer: read router key %s: %w", k, err)
		default:
			r.mappings[k] = m
		}
	}
	return r, nil
}

// listRefused reports whether a listing failed because the router answered
// with a refusal (a UPnP error, or igd.ErrNotSupported), not because it could
// not be reached: the same keys can then be read one by one.
func listRefused(err error) bool {
	return errors.Is(err, igd.ErrNotSupported) || igd.Code(err) != 0
}

// leaseLeft returns how long m, found by a read sent at at, may still live
// now, by the router's count (0: permanent, or not told) and by the lease
// this process was granted, counted from the add's sending: the time a
// delete sent now has before another host may hold the key. False: permanent.
func (lb *LoadBalancer) leaseLeft(o owner, m igd.Mapping, at time.Time) (time.Duration, bool) {
	now := lb.cfg.Clock.Now()
	exp := lb.heldAt(o, m.Key()).expires
	switch {
	case m.Lease == 0 && exp.IsZero():
		return 0, false
	case m.Lease == 0:
		return exp.Sub(now), true
	case exp.IsZero():
		return m.Lease - now.Sub(at), true
	}
	return min(m.Lease-now.Sub(at), exp.Sub(now)), true
}

// list fills got with the mappings at keys (sorted by compareKeys): one
// listing per run of keys of one protocol at most upnp.SafeListWidth ports
// wide, which the igd client lists at once, with no walk to learn the table.
func (lb *LoadBalancer) list(ctx context.Context, l igd.Lister, keys []igd.Key, got map[igd.Key]igd.Mapping) error {
	want := make(map[igd.Key]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	for i := 0; i < len(keys); {
		first := keys[i]
		j := i
		for j+1 < len(keys) && keys[j+1].Protocol == first.Protocol && int(keys[j+1].ExternalPort)-int(first.ExternalPort) < upnp.SafeListWidth {
			j++
		}
		r := igd.PortRange{First: first.ExternalPort, Last: keys[j].ExternalPort}
		i = j + 1
		ms, err := l.ListPortMappings(ctx, first.Protocol, r)
		if err != nil {
			return fmt.Errorf("loadbalancer: read router %s ports %d-%d: %w", first.Protocol, r.First, r.Last, err)
		}
		for _, m := range ms {
			if want[m.Key()] {
				got[m.Key()] = m
			}
		}
	}
	return nil
}

// owns reports whether m belongs to o: its description names o, and it points
// at a node this process knows, or at the address this process mapped the key
// to for o or found o's mapping at while it was a node's (any LAN host can
// write any description).
func (lb *LoadBalancer) owns(o owner, m igd.Mapping) bool {
	if p, ok := parseDescription(m.Description); (!ok || p.token != o.token) && !lb.mode.guardedFor(o, m) {
		return false
	}
	if lb.isNodeAddr(m.InternalClient) {
		return true
	}
	// Mapped, or found by a read, by this process to a node deleted since:
	// ours, to be moved.
	h, at := lb.heldAt(o, m.Key()), m.InternalClient.Unmap()
	return (h.written.InternalClient.IsValid() && h.written.InternalClient == at) || (h.found.IsValid() && h.found == at)
}

// cachedExternalIP returns the last usable external IP (invalid when none),
// for arbitration only: what is reported is always asked of the router.
func (lb *LoadBalancer) cachedExternalIP() netip.Addr {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.external
}

// refreshExternalIP asks the router for its external IP and remembers it when
// usable, else forgets it and returns it with an ErrExternalIPNotUsable.
func (lb *LoadBalancer) refreshExternalIP(ctx context.Context) (netip.Addr, error) {
	ext, err := lb.cfg.Client.ExternalIP(ctx)
	if errors.Is(err, igd.ErrInvalidExternalIP) {
		lb.mu.Lock()
		lb.external = netip.Addr{}
		lb.mu.Unlock()
		return netip.Addr{}, fmt.Errorf("%w: %w", ErrExternalIPNotUsable, err)
	}
	if err != nil {
		return netip.Addr{}, fmt.Errorf("loadbalancer: get external IP: %w", err)
	}
	ext = ext.Unmap()
	var why string
	switch {
	case !ext.Is4():
		why = "not an IPv4 address"
	case ext.IsUnspecified():
		why = "unspecified (a router answers 0.0.0.0 while its WAN link is down)"
	case !igd.IsPublic(ext) && !lb.cfg.AllowNonPublicExternalIP:
		why = "not a public address (double NAT or carrier-grade NAT: unreachable from the internet; set AllowNonPublicExternalIP to serve it anyway)"
	}
	var old netip.Addr
	lb.mu.Lock()
	old, lb.external = lb.external, netip.Addr{}
	if why == "" {
		lb.external = ext
	}
	lb.mu.Unlock()
	if why != "" {
		return ext, fmt.Errorf("%w: router reports %q: %s", ErrExternalIPNotUsable, ext, why)
	}
	if old != ext {
		klog.FromContext(ctx).Info("Router external IP", "ip", ext, "previous", old, "public", igd.IsPublic(ext))
	}
	return ext, nil
}
