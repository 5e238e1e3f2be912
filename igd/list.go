package igd

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ccmkit/ccmkit/internal/upnp"
	"k8s.io/klog/v2"
)

// listPage is the most entries one GetListOfPortMappings call returns (the
// IGD:2 spec and miniupnpd both cap it at 1000).
const listPage = 1000

// ListPortMappings implements Lister.
//
// Where the service is WANIPConnection:2 it reads the range with
// GetListOfPortMappings: one call while the protocol has fewer than 1000
// mappings in the range; past it (see listByRange) it splits the range in
// halves until every part fits one answer. Elsewhere (IGD:1 and
// WANPPPConnection:1 have no such action) it returns an error matching
// ErrNotSupported, and so it does when the router refuses the list action:
// 401 or 602 (not implemented), 402 or 501 (some routers reject its
// arguments). The error keeps the router's *UPnPError, and the refusal is
// remembered: later calls return it at once, asking the router nothing,
// until the router is discovered again. Callers then read single keys with
// GetPortMapping, or the whole table with ReadTable, which walks it.
// The listing is bounded by Config.MaxListEntries, so a misbehaving router
// cannot keep it going.
func (c *UPnPClient) ListPortMappings(ctx context.Context, proto Protocol, ports PortRange) ([]Mapping, error) {
	if !proto.Valid() || ports.First > ports.Last {
		return nil, fmt.Errorf("igd: list port mappings %s %d-%d: %w", proto, ports.First, ports.Last, ErrInvalidMapping)
	}
	gw, err := c.gateway(ctx)
	if err != nil {
		return nil, fmt.Errorf("igd: list port mappings: %w", err)
	}
	lister, ok := gw.conn.(portMappingLister)
	if !ok {
		return nil, fmt.Errorf("igd: list port mappings on %s: %w", gw.info.Location, ErrNotSupported)
	}
	if refusal := gw.listRefusal.Load(); refusal != nil {
		return nil, fmt.Errorf("igd: list port mappings on %s: %w: %w", gw.info.Location, ErrNotSupported, refusal)
	}
	var ms []Mapping
	if gw.info.GuardedListing {
		ms, err = c.listGuarded(ctx, gw, lister, proto, ports)
	} else {
		ms, err = c.listByRange(ctx, gw, lister, proto, ports)
	}
	if err == nil {
		return ms, nil
	}
	if refusal := listRefusal(err); refusal != nil {
		gw.listRefusal.Store(refusal)
		klog.FromContext(ctx).V(2).Info("Router refuses GetListOfPortMappings; reading its table another way",
			"location", gw.info.Location, "code", refusal.Code)
		return nil, fmt.Errorf("igd: list port mappings on %s: %w: %w", gw.info.Location, ErrNotSupported, err)
	}
	return nil, fmt.Errorf("igd: list port mappings on %s: %w", gw.info.Location, err)
}

// listRefusal returns the router's answer in err when it refuses the list
// action itself (not another action a guarded listing made), or nil.
func listRefusal(err error) *UPnPError {
	var ue *UPnPError
	if !errors.As(err, &ue) || ue.Action != "GetListOfPortMappings" {
		return nil
	}
	switch ue.Code {
	case upnp.CodeInvalidAction, upnp.CodeOptionalActionNotImpl, upnp.CodeInvalidArgs, upnp.CodeActionFailed:
		return ue
	}
	return nil
}

// walkPortMappings reads the whole table entry by entry with
// GetGenericPortMappingEntry, until 713 (or 714, or 402, which some routers
// answer past the end). It works on every router but costs one call per
// mapping. It is bounded by Config.MaxListEntries.
func (c *UPnPClient) walkPortMappings(ctx context.Context) ([]Mapping, error) {
	gw, err := c.gateway(ctx)
	if err != nil {
		return nil, fmt.Errorf("igd: walk port mappings: %w", err)
	}
	ms, err := c.walk(ctx, gw)
	if err != nil {
		return nil, fmt.Errorf("igd: walk port mappings on %s: %w", gw.info.Location, err)
	}
	return ms, nil
}

// width is the number of ports in r.
func (r PortRange) width() int { return int(r.Last) - int(r.First) + 1 }

// contains reports whether port is in r.
func (r PortRange) contains(port uint16) bool { return r.First <= port && port <= r.Last }

// halves splits r (at least two ports wide) into its lower and upper half.
func (r PortRange) halves() (PortRange, PortRange) {
	mid := uint16((int(r.First) + int(r.Last)) / 2)
	return PortRange{First: r.First, Last: mid}, PortRange{First: mid + 1, Last: r.Last}
}

// listByRange reads the table with GetListOfPortMappings.
//
// One answer holds at most 1000 entries, and which 1000 of a larger range is
// up to the router: miniupnpd 2.3.1 answers the newest first, not in port
// order, so a full answer says nothing about the ports it left out. A full
// answer is therefore read again as its two halves, recursively, until every
// part comes back short (or empty: 730); the union is the whole table
// whatever order the router answers in. A range no wider than a full answer
// is never split. With fewer than 1000 mappings of a protocol that is one
// call (DESIGN.md has the cost past it).
//
// A router that answers entries outside the requested range (it ignores
// NewStartPort or NewEndPort) cannot be paged: its answer is kept and the
// range is not split. Ranges are computed within 0-65535 and never wrap.
// Since a part is split only when it holds 1000 distinct ports, the
// Config.MaxListEntries bound on distinct mappings also bounds the calls.
func (c *UPnPClient) listByRange(ctx context.Context, gw *gateway, lister portMappingLister, proto Protocol, whole PortRange) ([]Mapping, error) {
	seen := map[Key]bool{}
	var out []Mapping
	// Depth first, lower half first: a stack of the ranges still to read.
	todo := []PortRange{whole}
	logged := false
	for len(todo) > 0 {
		r := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		var listing string
		// One call returns up to 1000 entries and the router builds the
		// whole answer before sending it, so it gets five call bounds.
		err := c.call(ctx, gw, "GetListOfPortMappings", 5*c.cfg.CallTimeout, func(ctx context.Context) (err error) {
			listing, err = lister.GetListOfPortMappingsCtx(ctx, r.First, r.Last, string(proto), true, uint16(c.listPage))
			return err
		})
		if Code(err) == upnp.CodePortMappingNotFound {
			continue // nothing in range
		}
		if err != nil {
			return nil, err
		}
		page, err := parsePortListing(listing)
		if err != nil {
			return nil, fmt.Errorf("GetListOfPortMappings %s ports %d-%d: %w", proto, r.First, r.Last, err)
		}
		// honest: every entry is of this protocol and range, each once.
		honest := true
		inPage := make(map[Key]bool, len(page))
		for _, m := range page {
			k := m.Key()
			if k.Protocol != proto || !r.contains(k.ExternalPort) || inPage[k] {
				honest = false
			}
			inPage[k] = true
			if !seen[k] {
				seen[k] = true
				out = append(out, m)
			}
		}
		if len(out) > c.cfg.MaxListEntries {
			return nil, fmt.Errorf("GetListOfPortMappings %s: router listed more than %d mappings (at ports %d-%d); stopped at Config.MaxListEntries=%d", proto, c.cfg.MaxListEntries, r.First, r.Last, c.cfg.MaxListEntries)
		}
		if len(page) < c.listPage || r.width() <= len(page) {
			continue // the whole range
		}
		if !honest {
			if !logged {
				logged = true
				klog.FromContext(ctx).V(2).Info("Router answered GetListOfPortMappings with entries outside the requested range; the listing may be incomplete",
					"location", gw.info.Location, "protocol", proto, "startPort", r.First, "endPort", r.Last)
			}
			continue
		}
		low, high := r.halves()
		todo = append(todo, high, low)
	}
	return out, nil
}

// portListing is the PortMappingList document GetListOfPortMappings returns
// (IGD:2 WANIPConnection:2 spec, section 2.6.22). Tags carry no namespace so
// that any prefix the router uses matches.
type portListing struct {
	Entries []struct {
		RemoteHost     string `xml:"NewRemoteHost"`
		ExternalPort   string `xml:"NewExternalPort"`
		Protocol       string `xml:"NewProtocol"`
		InternalPort   string `xml:"NewInternalPort"`
		InternalClient string `xml:"NewInternalClient"`
		Enabled        string `xml:"NewEnabled"`
		Description    string `xml:"NewDescription"`
		LeaseTime      string `xml:"NewLeaseTime"`
	} `xml:"PortMappingEntry"`
}

func parsePortListing(s string) ([]Mapping, error) {
	var l portListing
	if err := xml.Unmarshal([]byte(s), &l); err != nil {
		return nil, fmt.Errorf("parse PortMappingList: %w", err)
	}
	out := make([]Mapping, 0, len(l.Entries))
	for i, e := range l.Entries {
		ext, err1 := strconv.ParseUint(strings.TrimSpace(e.ExternalPort), 10, 16)
		in, err2 := strconv.ParseUint(strings.TrimSpace(e.InternalPort), 10, 16)
		lease, err3 := strconv.ParseUint(strings.TrimSpace(e.LeaseTime), 10, 32)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("parse PortMappingList entry %d: %w", i, err)
		}
		enabled := strings.TrimSpace(e.Enabled)
		out = append(out, Mapping{
			Protocol:       Protocol(strings.ToUpper(strings.TrimSpace(e.Protocol))),
			ExternalPort:   uint16(ext),
			InternalClient: parseAddr(strings.TrimSpace(e.InternalClient)),
			InternalPort:   uint16(in),
			Description:    e.Description,
			Lease:          time.Duration(lease) * time.Second,
			RemoteHost:     parseAddr(strings.TrimSpace(e.RemoteHost)),
			Enabled:        enabled == "1" || strings.EqualFold(enabled, "true") || strings.EqualFold(enabled, "yes"),
		})
	}
	return out, nil
}

// walkAttempts is how many times walk reads the table while other hosts
// keep changing it, before it gives up.
const walkAttempts = 3

// walk reads the whole table entry by entry with GetGenericPortMappingEntry.
//
// Entry indexes are positions in the router's current table: a mapping
// deleted during a walk (by this process or by any host) shifts every later
// entry down one place, and a walk that goes on counting skips a row. So
// walk keeps this client's own adds and deletes waiting for the whole walk
// (UPnPClient.writes), and detects the changes others make: before walking
// it finds the table's size and its first and last entries (a binary
// search, about 2·log2(size) calls), and after walking it reads the first
// entry again. When the walk did not end at that size, or either end
// differs, the table changed under it and it walks again, up to
// walkAttempts times; then it fails. It never returns a partial table.
//
// An entry read twice is a change too (repeated): rows moved under the
// walk, even when the size and both ends are as before; unless the next
// walk reads it twice at the same indexes in a table of the same size and
// both indexes still hold it when read again, which is a router listing it
// twice, and the walk keeps it once.
//
// Residual risk: changes by others that keep the size and both ends, and
// read no entry twice, go unnoticed. On a router that lists newest first
// (miniupnpd 2.3.1 with nftables) an insertion lands in front of the walk
// and makes it read an entry twice, so a deletion behind the walk cannot be
// hidden. On a router that lists oldest first, a host that deletes a row
// behind the walk, adds a new key and deletes and re-adds the last one
// keeps the size and both ends and hides the row the walk skipped: the walk
// then misses one mapping. Callers use walks for hints and to learn the
// table's shape, never as the proof a write rests on.
//
// An entry read that passes Config.CallTimeout is read once more before the
// walk fails (walkOnce): a router's reads slow down as its table grows (on
// miniupnpd each read costs in proportion to the table), and a walk of n
// entries would otherwise fail n times as often as one call, so the bigger
// the table the less often a load balancer's pass could read it. The same
// entry timing out twice in a row fails the walk. A router slower than
// CallTimeout on every read needs a larger CallTimeout.
func (c *UPnPClient) walk(ctx context.Context, gw *gateway) ([]Mapping, error) {
	done, err := c.holdWrites(ctx, "GetGenericPortMappingEntry")
	if err != nil {
		return nil, err
	}
	defer done()
	return c.walkHeld(ctx, gw)
}

// walkHeld is walk for a caller that holds this client's writes off
// (holdWrites).
func (c *UPnPClient) walkHeld(ctx context.Context, gw *gateway) ([]Mapping, error) {
	var changed, lastDup string
	lastLen := -1
	for range walkAttempts {
		n, first, last, err := c.tableSize(ctx, gw)
		if err != nil {
			return nil, err
		}
		raw, err := c.walkOnce(ctx, gw)
		if err != nil {
			return nil, err
		}
		var again Mapping
		var ok bool
		if n > 0 {
			if again, ok, err = c.entryAt(ctx, gw, 0); err != nil {
				return nil, err
			}
		}
		// The same entry read twice at the same places by two walks of a
		// table of one size, and at both places again now, is the
		// router's own repetition, not a change. (Another host that adds
		// a mapping ahead of each walk and deletes it behind makes both
		// walks read one entry twice too, but not the table after them.)
		dup, i, j := repeated(raw)
		stable := dup != "" && dup == lastDup && len(raw) == lastLen
		if stable {
			if stable, err = c.repeatsAt(ctx, gw, raw[i], i, j); err != nil {
				return nil, err
			}
		}
		lastDup, lastLen = dup, len(raw)
		switch {
		case dup != "" && !stable:
			changed = dup
		case len(raw) != n:
			changed = fmt.Sprintf("it held %d entries before the walk and %d during it", n, len(raw))
		case n > 0 && (raw[0].Key() != first || !ok || again.Key() != first):
			changed = fmt.Sprintf("its first entry was %s before the walk, %s during it, %s after it", first, raw[0].Key(), again.Key())
		case n > 0 && raw[n-1].Key() != last:
			changed = fmt.Sprintf("its last entry was %s before the walk and %s during it", last, raw[n-1].Key())
		default:
			seen := map[Key]bool{}
			var out []Mapping
			for _, m := range raw {
				if !seen[m.Key()] {
					seen[m.Key()] = true
					out = append(out, m)
				}
			}
			return out, nil
		}
		klog.FromContext(ctx).V(2).Info("Port-mapping table changed during a walk, walking again",
			"location", gw.info.Location, "change", changed)
	}
	return nil, fmt.Errorf("GetGenericPortMappingEntry: the table changed during each of %d walks (last time %s); not returning a partial table", walkAttempts, changed)
}

// repeated says which entry a walk read twice, and at which indexes, or ""
// when none was. Rows move under a walk: an add puts its entry at one end
// (the front on miniupnpd), a delete closes its gap, and a walk that reads
// an entry twice has seen rows move up under it, which a deletion behind it
// can hide from the size and both ends while the walk skips a row. Two
// entries of one key with different remote hosts are two mappings, not a
// change.
func repeated(raw []Mapping) (change string, first, again int) {
	type entry struct {
		key    Key
		remote netip.Addr
	}
	at := make(map[entry]int, len(raw))
	for i, m := range raw {
		e := entry{m.Key(), m.RemoteHost}
		if j, ok := at[e]; ok {
			return fmt.Sprintf("it listed %s at index %d and again at index %d", m.Key(), j, i), j, i
		}
		at[e] = i
	}
	return "", 0, 0
}

// repeatsAt reports whether the router lists m at both indexes i and j now.
func (c *UPnPClient) repeatsAt(ctx context.Context, gw *gateway, m Mapping, i, j int) (bool, error) {
	for _, at := range []int{i, j} {
		got, ok, err := c.entryAt(ctx, gw, at)
		if err != nil || !ok || got.Key() != m.Key() || got.RemoteHost != m.RemoteHost {
			return false, err
		}
	}
	return true, nil
}

// walkOnce reads entries from index 0 until the router says there are no
// more, bounded by Config.MaxListEntries.
func (c *UPnPClient) walkOnce(ctx context.Context, gw *gateway) ([]Mapping, error) {
	var out []Mapping
	for i := 0; ; i++ {
		if i >= c.cfg.MaxListEntries || i > 65535 {
			return nil, fmt.Errorf("GetGenericPortMappingEntry: router still answering at index %d; stopped at Config.MaxListEntries=%d", i, c.cfg.MaxListEntries)
		}
		m, ok, err := c.entryAt(ctx, gw, i)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// One slow read does not fail the walk (see walk).
			m, ok, err = c.entryAt(ctx, gw, i)
		}
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		out = append(out, m)
	}
}

// tableSize returns the number of entries in the table and the keys of the
// first and the last, by a binary search on GetGenericPortMappingEntry.
func (c *UPnPClient) tableSize(ctx context.Context, gw *gateway) (n int, first, last Key, err error) {
	m, ok, err := c.entryAt(ctx, gw, 0)
	if err != nil || !ok {
		return 0, Key{}, Key{}, err
	}
	first, last = m.Key(), m.Key()
	// lo is an index that exists, hi (once found) one that does not.
	lo, hi := 0, -1
	limit := min(c.cfg.MaxListEntries, 65536)
	for step := 1; hi < 0; step *= 2 {
		i := min(lo+step, limit)
		if i >= limit {
			// Probe the bound itself: a table that long is refused.
			i = limit - 1
			if i <= lo {
				return 0, Key{}, Key{}, fmt.Errorf("GetGenericPortMappingEntry: router still answering at index %d; stopped at Config.MaxListEntries=%d", lo, c.cfg.MaxListEntries)
			}
		}
		m, ok, err := c.entryAt(ctx, gw, i)
		if err != nil {
			return 0, Key{}, Key{}, err
		}
		if ok {
			lo, last = i, m.Key()
		} else {
			hi = i
		}
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		m, ok, err := c.entryAt(ctx, gw, mid)
		if err != nil {
			return 0, Key{}, Key{}, err
		}
		if ok {
			lo, last = mid, m.Key()
		} else {
			hi = mid
		}
	}
	return lo + 1, first, last, nil
}
