package igd

import (
	"errors"
	"fmt"
	"github.com/ccmkit/ccmkit/internal/igderr"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func validMapping() Mapping {
	return Mapping{
		Protocol:       TCP,
		ExternalPort:   8080,
		InternalClient: netip.MustParseAddr("192.0.2.10"),
		InternalPort:   30080,
		Description:    "test",
		Lease:          time.Hour,
	}
}

func TestMappingValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Mapping)
		field  string // "" means valid
	}{
		{"valid", func(*Mapping) {}, ""},
		{"valid UDP permanent", func(m *Mapping) { m.Protocol = UDP; m.Lease = 0 }, ""},
		{"valid 4in6 client", func(m *Mapping) { m.InternalClient = netip.MustParseAddr("::ffff:192.0.2.10") }, ""},
		{"valid remote host", func(m *Mapping) { m.RemoteHost = netip.MustParseAddr("198.51.101.99") }, ""},
		{"valid 63-byte description", func(m *Mapping) { m.Description = strings.Repeat("d", MaxDescriptionLen) }, ""},
		{"SCTP", func(m *Mapping) { m.Protocol = "SCTP" }, "Protocol"},
		{"lowercase tcp", func(m *Mapping) { m.Protocol = "tcp" }, "Protocol"},
		{"empty protocol", func(m *Mapping) { m.Protocol = "" }, "Protocol"},
		{"external port 0", func(m *Mapping) { m.ExternalPort = 0 }, "ExternalPort"},
		{"internal port 0", func(m *Mapping) { m.InternalPort = 0 }, "InternalPort"},
		{"no internal client", func(m *Mapping) { m.InternalClient = netip.Addr{} }, "InternalClient"},
		{"IPv6 internal client", func(m *Mapping) { m.InternalClient = netip.MustParseAddr("2001:db8::1") }, "InternalClient"},
		{"unspecified internal client", func(m *Mapping) { m.InternalClient = netip.IPv4Unspecified() }, "InternalClient"},
		{"64-byte description", func(m *Mapping) { m.Description = strings.Repeat("d", MaxDescriptionLen+1) }, "Description"},
		{"negative lease", func(m *Mapping) { m.Lease = -time.Second }, "Lease"},
		{"fractional lease", func(m *Mapping) { m.Lease = 1500 * time.Millisecond }, "Lease"},
		{"IPv6 remote host", func(m *Mapping) { m.RemoteHost = netip.MustParseAddr("2001:db8::1") }, "RemoteHost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validMapping()
			tt.mutate(&m)
			err := m.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want an error about %s", tt.field)
			}
			if !errors.Is(err, ErrInvalidMapping) {
				t.Errorf("Validate = %v, want an ErrInvalidMapping", err)
			}
			var fe *igderr.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate = %v, want a *igderr.FieldError", err)
			}
			if fe.Field != tt.field {
				t.Errorf("FieldError.Field = %q, want %q", fe.Field, tt.field)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not name the field %s", err, tt.field)
			}
		})
	}
}

func TestUPnPErrorIs(t *testing.T) {
	sentinels := []error{ErrNotAuthorized, ErrInvalidArrayIndex, ErrNoSuchEntry, ErrConflict,
		ErrSamePortValuesRequired, ErrOnlyPermanentLeases, ErrNoPortMapsAvailable}
	tests := []struct {
		code int
		want error // nil: matches no sentinel
	}{
		{606, ErrNotAuthorized},
		{713, ErrInvalidArrayIndex},
		{714, ErrNoSuchEntry},
		{718, ErrConflict},
		{724, ErrSamePortValuesRequired},
		{725, ErrOnlyPermanentLeases},
		{728, ErrNoPortMapsAvailable},
		{501, nil},
		{402, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.code), func(t *testing.T) {
			cause := errors.New("soap fault")
			err := fmt.Errorf("add TCP/80: %w", &UPnPError{Action: "AddPortMapping", Code: tt.code, Description: "x", Err: cause})
			for _, s := range sentinels {
				if got, want := errors.Is(err, s), s == tt.want; got != want {
					t.Errorf("errors.Is(%d, %v) = %v, want %v", tt.code, s, got, want)
				}
			}
			if !errors.Is(err, cause) {
				t.Errorf("errors.Is(%v, the SOAP fault) = false, want true: the SOAP fault stays reachable", err)
			}
			if got := Code(err); got != tt.code {
				t.Errorf("Code = %d, want %d", got, tt.code)
			}
			if !strings.Contains(err.Error(), "AddPortMapping") {
				t.Errorf("error %q does not name AddPortMapping", err)
			}
		})
	}
	if got := Code(errors.New("plain")); got != 0 {
		t.Errorf("Code of a plain error = %d, want 0", got)
	}
}

func TestIsPublic(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"198.51.101.7", true}, // the lab's WAN address
		{"8.8.8.8", true},
		{"::ffff:8.8.8.8", true},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"172.32.0.1", true},
		{"192.168.1.1", false},
		{"100.64.0.1", false}, // CGNAT
		{"100.127.255.255", false},
		{"100.128.0.1", true},
		{"127.0.0.1", false},
		{"169.254.1.1", false},
		{"192.0.2.1", false},
		{"198.51.100.1", false},
		{"203.0.113.5", false},
		{"198.18.0.1", false},
		{"224.0.0.1", false},
		{"255.255.255.255", false},
		{"0.0.0.0", false},
		{"2001:db8::1", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := IsPublic(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Errorf("IsPublic(%s) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
	if IsPublic(netip.Addr{}) {
		t.Error("IsPublic(the zero Addr) = true, want false")
	}
}
