package igd_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// A router that refuses GetListOfPortMappings (401 or 602: no such action;
// 402 or 501: it rejects the call's arguments) cannot list: ListPortMappings
// says so with ErrNotSupported, keeping the router's code, and asks it no
// more, so that callers read keys with GetPortMapping and ReadTable walks.
func TestListRefusalIsNotSupported(t *testing.T) {
	for _, server := range []string{"", "OpenWrt UPnP/1.1 MiniUPnPd/2.3.6"} { // guarded and not
		for _, code := range []int{upnp.CodeInvalidAction, upnp.CodeInvalidArgs, upnp.CodeActionFailed, upnp.CodeOptionalActionNotImpl} {
			t.Run(fmt.Sprintf("%d %s", code, server), func(t *testing.T) {
				r := fake.NewRouter(fake.RouterConfig{})
				srv := fake.NewServer(r, fake.ServerOptions{ServerHeader: server})
				t.Cleanup(srv.Close)
				c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
				if err != nil {
					t.Fatal(err)
				}
				ctx := testContext(t)
				seed(r, igd.TCP, 80, 443)
				r.Intercept(fake.RouterHooks{ListPortMappings: func(context.Context, netip.Addr, igd.Protocol, igd.PortRange, fake.ListFunc) ([]igd.Mapping, error) {
					return nil, &igd.UPnPError{Action: "GetListOfPortMappings", Code: code, Description: "refused"}
				}})
				for i := range 2 {
					_, err := c.ListPortMappings(ctx, igd.TCP, igd.PortRange{First: 80, Last: 443})
					if !errors.Is(err, igd.ErrNotSupported) || igd.Code(err) != code {
						t.Errorf("ListPortMappings #%d = %v, want ErrNotSupported with UPnP code %d", i+1, err, code)
					}
				}
				if n := r.CallCount(fake.MethodListPortMappings); n != 1 {
					t.Errorf("%d GetListOfPortMappings calls, want 1 (a refusal is remembered)", n)
				}
				if m, err := c.GetPortMapping(ctx, igd.TCP, 443); err != nil || m.Key() != (igd.Key{Protocol: igd.TCP, ExternalPort: 443}) {
					t.Errorf("GetPortMapping(TCP/443) after the refusal = %v, %v", m, err)
				}
				got, err := igd.ReadTable(ctx, c)
				keys, _ := keysOf(got)
				if want := []string{"TCP/443", "TCP/80"}; err != nil || diffKeys(want, keys) != "" {
					t.Errorf("ReadTable after the refusal = %v, %v; want %v (walked)", keys, err, want)
				}
			})
		}
	}
}

// Only the list action's refusal says "cannot list": a 501 to an add, or to
// the entry reads of a guarded listing, is an error like any other, and the
// client lists afterwards.
func TestOtherActionsFailuresAreNotListRefusals(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	srv := fake.NewServer(r, fake.ServerOptions{}) // miniupnpd 2.3.1: guarded
	t.Cleanup(srv.Close)
	c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	seed(r, igd.TCP, ports(20000, 100, 1)...) // over 64: a wide listing reads entries first
	failed := fake.RouterHooks{
		AddPortMapping: func(context.Context, netip.Addr, igd.Mapping, fake.AddFunc) (igd.Mapping, error) {
			return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeActionFailed, Description: "ActionFailed"}
		},
		GetGenericPortMappingEntry: func(context.Context, netip.Addr, int, fake.EntryFunc) (igd.Mapping, error) {
			return igd.Mapping{}, &igd.UPnPError{Action: "GetGenericPortMappingEntry", Code: upnp.CodeActionFailed, Description: "ActionFailed"}
		},
	}
	r.Intercept(failed)
	if _, err := c.AddPortMapping(ctx, quirkMapping(igd.TCP, 8080)); igd.Code(err) != upnp.CodeActionFailed || errors.Is(err, igd.ErrNotSupported) {
		t.Errorf("AddPortMapping answered 501 = %v, want 501 and not ErrNotSupported", err)
	}
	if _, err := c.ListPortMappings(ctx, igd.TCP, igd.AllPorts); igd.Code(err) != upnp.CodeActionFailed || errors.Is(err, igd.ErrNotSupported) {
		t.Errorf("ListPortMappings whose entry reads got 501 = %v, want 501 and not ErrNotSupported", err)
	}
	r.ClearHooks()
	ms, err := c.ListPortMappings(ctx, igd.TCP, igd.AllPorts)
	if err != nil || len(ms) != 100 {
		t.Errorf("ListPortMappings afterwards = %d mappings, %v; want 100", len(ms), err)
	}
}
