package igd

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// listPage is the most entries one GetListOfPortMappings call returns (the
// IGD:2 spec and miniupnpd both cap it at 1000).
const listPage = 1000

// ListPortMappings implements Client.
//
// Where the service is WANIPConnection:2 it reads the table with
// GetListOfPortMappings: one call per protocol (the action needs NewProtocol
// and returns only that protocol's entries), paged by external port past
// 1000 entries. On miniupnpd with 60 mappings that is about 180 ms against
// 7.5 s for the entry-by-entry walk. Elsewhere, or when the router does not
// implement the action (401, 602) or refuses its arguments (402, 501, 606), it
// walks the table with GetGenericPortMappingEntry until 713 (or 714, or 402,
// which some routers answer past the end). Both ways are bounded by
// Config.MaxListEntries entries read, so a misbehaving router cannot keep
// the listing going. A mapping seen twice (the table shifted during a walk,
// or a router repeated entries across pages) is returned once.
func (c *UPnPClient) ListPortMappings(ctx context.Context) ([]Mapping, error) {
	gw, err := c.gateway(ctx)
	if err != nil {
		return nil, fmt.Errorf("igd: list port mappings: %w", err)
	}
	if lister, ok := gw.conn.(portMappingLister); ok && !gw.noList.Load() {
		ms, err := c.listByRange(ctx, gw, lister)
		switch code := Code(err); {
		case err == nil:
			return ms, nil
		case code == CodeInvalidAction || code == CodeOptionalActionNotImpl:
			gw.noList.Store(true)
			klog.FromContext(ctx).V(2).Info("Router does not implement GetListOfPortMappings, walking its table instead",
				"location", gw.info.Location, "code", code)
		case code == CodeInvalidArgs || code == CodeActionFailed || code == CodeNotAuthorized:
			// Refused this time; walk, and try the list call again next time.
		default:
			return nil, fmt.Errorf("igd: list port mappings on %s: %w", gw.info.Location, err)
		}
	}
	ms, err := c.walk(ctx, gw)
	if err != nil {
		return nil, fmt.Errorf("igd: list port mappings on %s: %w", gw.info.Location, err)
	}
	return ms, nil
}

// listByRange reads the table with GetListOfPortMappings.
func (c *UPnPClient) listByRange(ctx context.Context, gw *gateway, lister portMappingLister) ([]Mapping, error) {
	seen := map[Key]bool{}
	var out []Mapping
	read := 0 // entries received, duplicates included
	for _, proto := range []Protocol{TCP, UDP} {
		start := uint16(0)
		for {
			var listing string
			// One call returns up to 1000 entries and the router builds the
			// whole answer before sending it, so it gets five call bounds.
			err := c.call(ctx, gw, "GetListOfPortMappings", 5*c.cfg.CallTimeout, func(ctx context.Context) (err error) {
				listing, err = lister.GetListOfPortMappingsCtx(ctx, start, 65535, string(proto), true, listPage)
				return err
			})
			if Code(err) == CodePortMappingNotFound {
				break // nothing (more) in range
			}
			if err != nil {
				return nil, err
			}
			page, err := parsePortListing(listing)
			if err != nil {
				return nil, fmt.Errorf("GetListOfPortMappings %s from port %d: %w", proto, start, err)
			}
			read += len(page)
			var last uint16
			for _, m := range page {
				last = max(last, m.ExternalPort)
				if !seen[m.Key()] {
					seen[m.Key()] = true
					out = append(out, m)
				}
			}
			// A short page is the last one. A full page continues after its
			// highest port; a page that does not move forward ends the loop
			// rather than asking the same range forever.
			if len(page) < listPage || last == 65535 || last < start {
				break
			}
			// A router whose pages creep forward a port at a time would
			// otherwise take 65535 calls to finish.
			if read >= c.cfg.MaxListEntries {
				return nil, fmt.Errorf("GetListOfPortMappings %s: router still listing from port %d after %d entries; stopped at Config.MaxListEntries=%d", proto, last+1, read, c.cfg.MaxListEntries)
			}
			start = last + 1
		}
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

// walk reads the table entry by entry with GetGenericPortMappingEntry.
func (c *UPnPClient) walk(ctx context.Context, gw *gateway) ([]Mapping, error) {
	seen := map[Key]bool{}
	var out []Mapping
	for i := 0; ; i++ {
		if i >= c.cfg.MaxListEntries || i > 65535 {
			return nil, fmt.Errorf("GetGenericPortMappingEntry: router still answering at index %d; stopped at Config.MaxListEntries=%d", i, c.cfg.MaxListEntries)
		}
		var m Mapping
		err := c.call(ctx, gw, "GetGenericPortMappingEntry", c.cfg.CallTimeout, func(ctx context.Context) error {
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
		if errors.Is(err, ErrInvalidArrayIndex) || errors.Is(err, ErrNoSuchEntry) || Code(err) == CodeInvalidArgs {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if !seen[m.Key()] {
			seen[m.Key()] = true
			out = append(out, m)
		}
	}
}
