package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ccmkit/ccmkit/igd"
)

// read returns what the router holds at keys, the proof every write rests
// on: a listing per protocol where the client can list, else one get a key.
func (lb *LoadBalancer) read(ctx context.Context, keys []igd.Key) (map[igd.Key]igd.Mapping, error) {
	got := make(map[igd.Key]igd.Mapping, len(keys))
	if len(keys) == 0 {
		return got, nil
	}
	keys = slices.Compact(slices.SortedFunc(slices.Values(keys), compareKeys)) // list needs them sorted
	if l, ok := lb.cfg.Client.(igd.Lister); ok && !lb.noList.Load() {
		switch err := lb.list(ctx, l, keys, got); {
		case err == nil:
			return got, nil
		case !errors.Is(err, igd.ErrNotSupported):
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

// maxListWidth bounds the port range of one listing: miniupnpd up to 2.3.3
// (nftables) dies listing over 128 mappings of one protocol in a range, and a
// range 128 ports wide cannot hold more. The igd client guards wider ranges
// too, but on such a router it must first learn the table (a walk, which
// holds off writes); ranges this narrow it lists at once.
const maxListWidth = 128

// list fills got with the mappings at keys (sorted by compareKeys): one
// listing per run of keys of one protocol at most maxListWidth ports wide.
func (lb *LoadBalancer) list(ctx context.Context, l igd.Lister, keys []igd.Key, got map[igd.Key]igd.Mapping) error {
	want := make(map[igd.Key]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	for i := 0; i < len(keys); {
		first := keys[i]
		j := i
		for j+1 < len(keys) && keys[j+1].Protocol == first.Protocol && int(keys[j+1].ExternalPort)-int(first.ExternalPort) < maxListWidth {
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
// to for o (any LAN host can write any description).
func (lb *LoadBalancer) owns(o owner, m igd.Mapping) bool {
	p, ok := parseDescription(m.Description)
	if !ok || p.token != o.token {
		return false
	}
	if lb.isNodeAddr(m.InternalClient) {
		return true
	}
	// Mapped by this process to a node deleted since: ours, to be moved.
	h := lb.heldAt(o, m.Key())
	return h.written.InternalClient.IsValid() && h.written.InternalClient == m.InternalClient.Unmap()
}
