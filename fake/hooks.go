package fake

import (
	"context"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ccmkit/ccmkit/igd"
)

// Method names, as recorded in Call.Method: one per field of RouterHooks, the
// operation a call is, whichever way it comes (through a Client, or through
// a Server as one of the SOAP actions the field names).
const (
	MethodAddPortMapping             = "AddPortMapping"
	MethodDeletePortMapping          = "DeletePortMapping"
	MethodGetPortMapping             = "GetPortMapping"
	MethodListPortMappings           = "ListPortMappings"
	MethodExternalIP                 = "ExternalIP"
	MethodLocalAddr                  = "LocalAddr"
	MethodGetGenericPortMappingEntry = "GetGenericPortMappingEntry"
	// MethodSOAPAction is a SOAP action with no operation of its own
	// (GetStatusInfo, DeletePortMappingRange, ...): Call.Action names it.
	MethodSOAPAction = "SOAPAction"
)

// Call is one call the router received, as recorded in its call log.
type Call struct {
	// Method is the operation, one of the Method constants, the same
	// through a Client and through a Server.
	Method string
	// Action is the SOAP action of a call through a Server (for example
	// "GetSpecificPortMappingEntry" for MethodGetPortMapping); empty
	// through a Client.
	Action string
	// Client is the address of the host that made the call.
	Client netip.Addr
	// Key is the mapping the call is about, when it names one. For a list
	// call (ListPortMappings, GetListOfPortMappings) Key.Protocol is the
	// protocol asked for and Key.ExternalPort is 0.
	Key igd.Key
	// Ports is the port range a list call asked for.
	Ports igd.PortRange
	// Mapping is the argument of AddPortMapping (or AddAnyPortMapping), or
	// the mapping a GetPortMapping (or GetSpecificPortMappingEntry /
	// GetGenericPortMappingEntry) returned.
	Mapping igd.Mapping
	// Mappings is what ListPortMappings (or GetListOfPortMappings) returned.
	Mappings []igd.Mapping
	// Addr is what ExternalIP (or GetExternalIPAddress) or LocalAddr
	// returned.
	Addr netip.Addr
	// Err is the error the call returned.
	Err error
}

// clone returns a copy of c that shares no memory with it.
func (c Call) clone() Call {
	c.Mappings = slices.Clone(c.Mappings)
	return c
}

// The next functions a hook is given: each passes the call on, as it is or
// changed, to the hooks added before and then to the router's table, and
// returns their answer.
type (
	// AddrFunc passes on ExternalIP or LocalAddr.
	AddrFunc func(ctx context.Context) (netip.Addr, error)
	// AddFunc passes on AddPortMapping with mapping m and returns the
	// mapping as stored.
	AddFunc func(ctx context.Context, m igd.Mapping) (igd.Mapping, error)
	// DeleteFunc passes on DeletePortMapping of k.
	DeleteFunc func(ctx context.Context, k igd.Key) error
	// GetFunc passes on GetPortMapping of k.
	GetFunc func(ctx context.Context, k igd.Key) (igd.Mapping, error)
	// ListFunc passes on ListPortMappings of proto in ports.
	ListFunc func(ctx context.Context, proto igd.Protocol, ports igd.PortRange) ([]igd.Mapping, error)
	// EntryFunc passes on GetGenericPortMappingEntry of index.
	EntryFunc func(ctx context.Context, index int) (igd.Mapping, error)
	// ActionFunc passes on a SOAP action.
	ActionFunc func(ctx context.Context) error
)

// RouterHooks intercept calls to a Router, one field per operation; a nil field
// lets its calls through. Each operation's hooks fire whichever way the
// call comes: through a Client (the igd.Client method) or through a Server
// (the SOAP actions named on the field), so one hook steers the in-memory
// and the SOAP path alike. A hook gets the calling host (from), the call's
// arguments and next; it may change the arguments, pass the call on with
// next and change the answer, or answer the call itself without calling
// next. Hooks run outside the router's lock, may block, and should honour
// ctx. Invalid arguments (a Client's validation, a malformed SOAP request)
// are refused before any hook runs. Every call is logged with the answer
// it finally got.
type RouterHooks struct {
	// ExternalIP intercepts Client.ExternalIP and GetExternalIPAddress.
	ExternalIP func(ctx context.Context, from netip.Addr, next AddrFunc) (netip.Addr, error)
	// LocalAddr intercepts Client.LocalAddr (a Client's own address; no
	// SOAP action asks for it).
	LocalAddr func(ctx context.Context, from netip.Addr, next AddrFunc) (netip.Addr, error)
	// AddPortMapping intercepts Client.AddPortMapping, AddPortMapping and
	// AddAnyPortMapping. The mapping next stores is what the router keeps;
	// through AddAnyPortMapping next may store it at another external port,
	// and returns it with that port. A client's retry with a permanent
	// lease after a 725 answer is a second call, on both paths; a Client
	// returns the mapping it was given, as the real client does, whatever
	// a hook changed or answered.
	AddPortMapping func(ctx context.Context, from netip.Addr, m igd.Mapping, next AddFunc) (igd.Mapping, error)
	// DeletePortMapping intercepts Client.DeletePortMapping and
	// DeletePortMapping.
	DeletePortMapping func(ctx context.Context, from netip.Addr, k igd.Key, next DeleteFunc) error
	// GetPortMapping intercepts Client.GetPortMapping and
	// GetSpecificPortMappingEntry.
	GetPortMapping func(ctx context.Context, from netip.Addr, k igd.Key, next GetFunc) (igd.Mapping, error)
	// ListPortMappings intercepts Client.ListPortMappings and
	// GetListOfPortMappings (through a Server, the listing is then cut to
	// the NewNumberOfPorts asked for only when next made it).
	ListPortMappings func(ctx context.Context, from netip.Addr, proto igd.Protocol, ports igd.PortRange, next ListFunc) ([]igd.Mapping, error)
	// GetGenericPortMappingEntry intercepts GetGenericPortMappingEntry, the
	// walk of the table by index (a Server only: the in-memory Client never
	// walks).
	GetGenericPortMappingEntry func(ctx context.Context, from netip.Addr, index int, next EntryFunc) (igd.Mapping, error)
	// SOAPAction intercepts every SOAP call to a Server, with its action
	// name, before the operation's own hook: the way to steer actions that
	// have no field here (GetStatusInfo, DeletePortMappingRange, ...).
	// Failing it fails the call; it never sees Client calls.
	SOAPAction func(ctx context.Context, from netip.Addr, action string, next ActionFunc) error
}

// Intercept puts h in front of every hook added before: h's hooks run
// first, and their next reaches the earlier ones, then the table. Hooks stay
// until ClearHooks; Reboot keeps them.
func (r *Router) Intercept(h RouterHooks) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hooks = append([]RouterHooks{h}, r.hooks...)
}

// ClearHooks removes every hook.
func (r *Router) ClearHooks() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hooks = nil
}

// layers returns the hooks, newest first.
func (r *Router) layers() []RouterHooks {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.hooks)
}

// chain wraps base, the call's own work, in the hook that wrap picks from
// each layer (newest first) that has one, the oldest innermost. The
// Router's and the LoadBalancer's hooks both chain this way.
func chain[H, F any](layers []H, base F, wrap func(h H, next F) (F, bool)) F {
	for i := len(layers) - 1; i >= 0; i-- {
		if f, ok := wrap(layers[i], base); ok {
			base = f
		}
	}
	return base
}

// Chains of each operation, for a call from host from.

func externalIPChain(layers []RouterHooks, from netip.Addr, base AddrFunc) AddrFunc {
	return chain(layers, base, func(h RouterHooks, next AddrFunc) (AddrFunc, bool) {
		f := h.ExternalIP
		return func(ctx context.Context) (netip.Addr, error) { return f(ctx, from, next) }, f != nil
	})
}

func localAddrChain(layers []RouterHooks, from netip.Addr, base AddrFunc) AddrFunc {
	return chain(layers, base, func(h RouterHooks, next AddrFunc) (AddrFunc, bool) {
		f := h.LocalAddr
		return func(ctx context.Context) (netip.Addr, error) { return f(ctx, from, next) }, f != nil
	})
}

func addChain(layers []RouterHooks, from netip.Addr, base AddFunc) AddFunc {
	return chain(layers, base, func(h RouterHooks, next AddFunc) (AddFunc, bool) {
		f := h.AddPortMapping
		return func(ctx context.Context, m igd.Mapping) (igd.Mapping, error) { return f(ctx, from, m, next) }, f != nil
	})
}

func deleteChain(layers []RouterHooks, from netip.Addr, base DeleteFunc) DeleteFunc {
	return chain(layers, base, func(h RouterHooks, next DeleteFunc) (DeleteFunc, bool) {
		f := h.DeletePortMapping
		return func(ctx context.Context, k igd.Key) error { return f(ctx, from, k, next) }, f != nil
	})
}

func getChain(layers []RouterHooks, from netip.Addr, base GetFunc) GetFunc {
	return chain(layers, base, func(h RouterHooks, next GetFunc) (GetFunc, bool) {
		f := h.GetPortMapping
		return func(ctx context.Context, k igd.Key) (igd.Mapping, error) { return f(ctx, from, k, next) }, f != nil
	})
}

func listChain(layers []RouterHooks, from netip.Addr, base ListFunc) ListFunc {
	return chain(layers, base, func(h RouterHooks, next ListFunc) (ListFunc, bool) {
		f := h.ListPortMappings
		return func(ctx context.Context, proto igd.Protocol, ports igd.PortRange) ([]igd.Mapping, error) {
			return f(ctx, from, proto, ports, next)
		}, f != nil
	})
}

func entryChain(layers []RouterHooks, from netip.Addr, base EntryFunc) EntryFunc {
	return chain(layers, base, func(h RouterHooks, next EntryFunc) (EntryFunc, bool) {
		f := h.GetGenericPortMappingEntry
		return func(ctx context.Context, index int) (igd.Mapping, error) { return f(ctx, from, index, next) }, f != nil
	})
}

func actionChain(layers []RouterHooks, from netip.Addr, action string, base ActionFunc) ActionFunc {
	return chain(layers, base, func(h RouterHooks, next ActionFunc) (ActionFunc, bool) {
		f := h.SOAPAction
		return func(ctx context.Context) error { return f(ctx, from, action, next) }, f != nil
	})
}

// Nth returns a counter for hooks that act on one call only: each call of
// the returned function counts one, and it reports true on the nth (counting
// from 1) and never again. It is safe for concurrent use.
func Nth(n int) func() bool {
	var seen atomic.Int64
	return func() bool { return seen.Add(1) == int64(n) }
}

// Sleep waits d (real time) for a hook that delays its call, and returns
// nil, or ctx's error if ctx ends first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Hold waits until release is closed, for a hook that holds its call in
// flight until the test lets it go, and returns nil, or ctx's error if ctx
// ends first.
func Hold(ctx context.Context, release <-chan struct{}) error {
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// record appends call to the call log.
func (r *Router) record(call Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call.clone())
}

// Calls returns a copy of the call log, oldest first.
func (r *Router) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Call, len(r.calls))
	for i, c := range r.calls {
		out[i] = c.clone()
	}
	return out
}

// CallCount returns how many calls of method (a Method constant) the log
// holds, whichever way they came.
func (r *Router) CallCount(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.Method == method {
			n++
		}
	}
	return n
}

// ResetCalls empties the call log.
func (r *Router) ResetCalls() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = nil
}
