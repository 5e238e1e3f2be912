package loadbalancer

import (
	"context"
	"errors"
	"fmt"

	"github.com/ccmkit/ccmkit/igd"
)

// read returns what the router holds at keys, the proof every write rests
// on: a listing per protocol where the client can list, else one get a key.
func (lb *LoadBalancer) read(ctx context.Context, keys []igd.Key) (map[igd.Key]igd.Mapping, error) {
	got := make(map[igd.Key]igd.Mapping, len(keys))
	if len(keys) == 0 {
		return got, nil
	}
	if l, ok := lb.cfg.Client.(igd.Lister); ok && !lb.noList.Load() {
		err := lb.list(ctx, l, keys, got)
		if err == nil {
			return got, nil
		}
		if !errors.Is(err, igd.ErrNotSupported) {
			return nil, err
		}
		lb.noList.Store(true)
		clear(got)
	}
	for _, k := range keys {
		m, err := lb.cfg.Client.GetPortMapping(ctx, k.Protocol, k.ExternalPort)
		switch {
		case errors.Is(err, igd.ErrNoSuchEntry):
		case err != nil:
			return nil, fmt.Errorf("loadbalancer: read router key %s: %w", k, err)
		default:
			got[k] = m
		}
	}
	return got, nil
}

// list fills got with the mappings at keys, one listing per protocol.
func (lb *LoadBalancer) list(ctx context.Context, l igd.Lister, keys []igd.Key, got map[igd.Key]igd.Mapping) error {
	want := make(map[igd.Key]bool, len(keys))
	ranges := make(map[igd.Protocol]igd.PortRange)
	for _, k := range keys {
		want[k] = true
		r, ok := ranges[k.Protocol]
		if !ok {
			r = igd.PortRange{First: k.ExternalPort, Last: k.ExternalPort}
		}
		r.First, r.Last = min(r.First, k.ExternalPort), max(r.Last, k.ExternalPort)
		ranges[k.Protocol] = r
	}
	for _, proto := range []igd.Protocol{igd.TCP, igd.UDP} {
		r, ok := ranges[proto]
		if !ok {
			continue
		}
		ms, err := l.ListPortMappings(ctx, proto, r)
		if err != nil {
			return fmt.Errorf("loadbalancer: read router %s ports %d-%d: %w", proto, r.First, r.Last, err)
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
// at a node (any LAN host can write any description).
func (lb *LoadBalancer) owns(o owner, m igd.Mapping) bool {
	p, ok := parseDescription(m.Description)
	return ok && p.token == o.token && lb.isNodeAddr(m.InternalClient)
}
