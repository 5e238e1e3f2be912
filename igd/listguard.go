package igd

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ccmkit/ccmkit/internal/upnp"
	"k8s.io/klog/v2"
)

// On a guarded router every listing is kept to ranges the client knows to
// hold at most listPlanned mappings of the protocol, leaving
// upnp.SafeListWidth-listPlanned of margin for mappings other hosts add between
// two reads.
const (
	// listPlanned is the most known mappings one listed range holds.
	listPlanned = 64
	// listSurprise is an answer size that says the table grew much since it
	// was learnt: the rest of the plan may no longer be safe.
	listSurprise = listPlanned + (upnp.SafeListWidth-listPlanned)/2
)

// crashesOnLongLists reports whether a router whose HTTP server describes
// itself as server may die on long listings (DESIGN.md): miniupnpd before
// 2.3.4, or miniupnpd with no readable version.
func crashesOnLongLists(server string) bool {
	const product = "miniupnpd"
	for _, tok := range strings.Fields(server) {
		name, version, _ := strings.Cut(tok, "/")
		if !strings.EqualFold(name, product) {
			continue
		}
		v, ok := parseVersion(version)
		return !ok || slices.Compare(v, []int{2, 3, 4}) < 0
	}
	return false
}

// parseVersion reads "2.3.1" (or "2.3", or "2.3.4-rc1") as [2 3 1];
// missing parts are 0.
func parseVersion(s string) ([]int, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 3 {
		parts = parts[:3]
	}
	v := []int{0, 0, 0}
	for i, p := range parts {
		end := strings.IndexFunc(p, func(r rune) bool { return r < '0' || r > '9' })
		if end == 0 || (end > 0 && i < len(parts)-1) {
			return nil, false
		}
		if end > 0 {
			p = p[:end]
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, false
		}
		v[i] = n
	}
	return v, true
}

// listGuarded reads the mappings of proto in whole on a router that dies on
// long listings, never asking for a range the client does not know to hold
// at most listPlanned of them (DESIGN.md tells why and the residual risk).
//
// A range at most upnp.SafeListWidth ports wide is listed at once. Otherwise,
// what the client knows is the table's shape (gateway.known): the ports as
// last read, with this client's own adds since counted and its own deletes
// since uncounted (gateway.wrote), and this client's writes are held off
// until the listing is learnt, so that none lands in a range between the
// plan and the answer. Before the first read it asks
// GetGenericPortMappingEntry for entry listPlanned: when there is none, the
// whole table (both protocols) holds at most listPlanned mappings and one
// listing is safe. Otherwise it walks the table entry by entry, which also
// teaches it the shape. With the shape known, whole is listed in ranges of at
// most listPlanned known mappings each; a range that comes back with more
// than listSurprise says the table grew fast, and the client walks again
// rather than list the rest.
func (c *UPnPClient) listGuarded(ctx context.Context, gw *gateway, lister portMappingLister, proto Protocol, whole PortRange) ([]Mapping, error) {
	if whole.width() <= upnp.SafeListWidth {
		// No more than upnp.SafeListWidth mappings of a protocol fit in a range
		// this narrow: it is safe whatever the table holds. This client's
		// writes go on meanwhile, so what it lists only adds to the shape.
		out, err := c.listByRange(ctx, gw, lister, proto, whole)
		if err != nil {
			return nil, err
		}
		gw.learnPorts(proto, out)
		return out, nil
	}
	done, err := c.holdWrites(ctx, "GetListOfPortMappings")
	if err != nil {
		return nil, err
	}
	defer done()
	if known, ok := gw.knownPorts(proto); ok {
		out, surprised, err := c.listPlanned(ctx, gw, lister, proto, whole, known)
		if err != nil {
			return nil, err
		}
		if !surprised {
			gw.learnRange(proto, whole, out)
			return out, nil
		}
		klog.FromContext(ctx).V(2).Info("Port-mapping table grew since it was last read; walking it before listing again",
			"location", gw.info.Location, "protocol", proto, "server", gw.info.Server)
	} else if small, err := c.tableAtMost(ctx, gw, listPlanned); err != nil {
		return nil, err
	} else if small {
		return c.listLearn(ctx, gw, lister, proto, whole)
	}
	table, err := c.walkHeld(ctx, gw)
	if err != nil {
		return nil, err
	}
	gw.learnTable(table)
	var out []Mapping
	for _, m := range table {
		if m.Protocol == proto && whole.contains(m.ExternalPort) {
			out = append(out, m)
		}
	}
	return out, nil
}

// listPlanned lists whole in ranges of at most listPlanned known ports each.
// surprised reports a range that came back with more than listSurprise
// mappings; the listing then stops early.
func (c *UPnPClient) listPlanned(ctx context.Context, gw *gateway, lister portMappingLister, proto Protocol, whole PortRange, known []uint16) (out []Mapping, surprised bool, err error) {
	for _, r := range planRanges(known, whole, listPlanned) {
		ms, err := c.listByRange(ctx, gw, lister, proto, r)
		if err != nil {
			return nil, false, err
		}
		out = append(out, ms...)
		if len(ms) > listSurprise {
			return out, true, nil
		}
	}
	return out, false, nil
}

// planRanges splits whole into consecutive ranges that each hold at most
// per of the sorted ports known; together they cover whole exactly.
func planRanges(known []uint16, whole PortRange, per int) []PortRange {
	lo, _ := slices.BinarySearch(known, whole.First)
	hi, found := slices.BinarySearch(known, whole.Last)
	if found {
		hi++
	}
	in := known[lo:hi]
	var out []PortRange
	start := whole.First
	for i := per; i < len(in); i += per {
		out = append(out, PortRange{First: start, Last: in[i] - 1})
		start = in[i]
	}
	return append(out, PortRange{First: start, Last: whole.Last})
}

// tableAtMost reports whether the router's table holds at most n entries
// (both protocols): whether GetGenericPortMappingEntry has no entry n.
func (c *UPnPClient) tableAtMost(ctx context.Context, gw *gateway, n int) (bool, error) {
	_, ok, err := c.entryAt(ctx, gw, n)
	return !ok, err
}

// knownPorts returns the sorted ports of proto the client knows of, if a
// read covered them all.
func (gw *gateway) knownPorts(proto Protocol) ([]uint16, bool) {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	ports, ok := gw.known[proto]
	return slices.Clone(ports), ok
}

// wrote records a write of this client to the table's shape: an add of k
// (present), counted whatever the router answered, or a delete the router
// confirmed. A protocol whose shape is not known yet is left alone: its
// first read counts every mapping.
func (gw *gateway) wrote(k Key, present bool) {
	if !gw.info.GuardedListing {
		return
	}
	gw.mu.Lock()
	defer gw.mu.Unlock()
	ports, ok := gw.known[k.Protocol]
	if !ok {
		return
	}
	i, found := slices.BinarySearch(ports, k.ExternalPort)
	switch {
	case present && !found:
		gw.known[k.Protocol] = slices.Insert(ports, i, k.ExternalPort)
	case !present && found:
		gw.known[k.Protocol] = slices.Delete(ports, i, i+1)
	}
}

// learnPorts records ports a listing found, and forgets none: a listing that
// ran beside this client's writes may predate an add.
func (gw *gateway) learnPorts(proto Protocol, listed []Mapping) {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	ports, ok := gw.known[proto]
	if !ok {
		return
	}
	for _, m := range listed {
		if i, found := slices.BinarySearch(ports, m.ExternalPort); !found {
			ports = slices.Insert(ports, i, m.ExternalPort)
		}
	}
	gw.known[proto] = ports
}

// learnTable records the shape of a whole table.
func (gw *gateway) learnTable(table []Mapping) {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	gw.known = map[Protocol][]uint16{TCP: {}, UDP: {}}
	for _, m := range table {
		if p, ok := gw.known[m.Protocol]; ok {
			gw.known[m.Protocol] = append(p, m.ExternalPort)
		}
	}
	for proto, ports := range gw.known {
		slices.Sort(ports)
		gw.known[proto] = slices.Compact(ports)
	}
}

// learnRange records what a listing of proto over r found: it replaces the
// known ports in r, and is the whole shape when r is every port.
func (gw *gateway) learnRange(proto Protocol, r PortRange, listed []Mapping) {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	old, ok := gw.known[proto]
	if !ok && r != AllPorts {
		return
	}
	var ports []uint16
	for _, p := range old {
		if !r.contains(p) {
			ports = append(ports, p)
		}
	}
	for _, m := range listed {
		ports = append(ports, m.ExternalPort)
	}
	slices.Sort(ports)
	if gw.known == nil {
		gw.known = map[Protocol][]uint16{}
	}
	gw.known[proto] = slices.Compact(ports)
}

// entryAt reads entry i of the table with GetGenericPortMappingEntry. ok is
// false past the end (713, or 714 or 402, which some routers answer there).
func (c *UPnPClient) entryAt(ctx context.Context, gw *gateway, i int) (m Mapping, ok bool, err error) {
	err = c.call(ctx, gw, "GetGenericPortMappingEntry", c.cfg.CallTimeout, func(ctx context.Context) error {
		remote, ext, proto, in, client, enabled, desc, lease, err := gw.conn.GetGenericPortMappingEntryCtx(ctx, uint16(i))
		if err != nil {
			return err
		}
		m = Mapping{
			Protocol:       Protocol(strings.ToUpper(proto)),
			ExternalPort:   ext,
			InternalClient: parseAddr(client),
			InternalPort:   in,
			Description:    desc,
			Lease:          time.Duration(lease) * time.Second,
			RemoteHost:     parseAddr(remote),
			Enabled:        enabled,
		}
		return nil
	})
	if errors.Is(err, ErrInvalidArrayIndex) || errors.Is(err, ErrNoSuchEntry) || Code(err) == upnp.CodeInvalidArgs {
		return Mapping{}, false, nil
	}
	if err != nil {
		return Mapping{}, false, err
	}
	return m, true, nil
}

// listLearn lists whole at once and records what it found. The caller holds
// this client's writes off (holdWrites).
func (c *UPnPClient) listLearn(ctx context.Context, gw *gateway, lister portMappingLister, proto Protocol, whole PortRange) ([]Mapping, error) {
	out, err := c.listByRange(ctx, gw, lister, proto, whole)
	if err != nil {
		return nil, err
	}
	gw.learnRange(proto, whole, out)
	return out, nil
}
