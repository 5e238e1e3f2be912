package fake

import (
	"context"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ccmkit/ccmkit/igd"
)

// Method names, as recorded in Call.Method and as keys of hooks. Calls made
// through a Client use the igd.Client method names; calls made through a
// Server use the SOAP action names, two of which are the same
// (AddPortMapping, DeletePortMapping), so a hook on them steers both.
const (
	MethodAddPortMapping    = "AddPortMapping"
	MethodDeletePortMapping = "DeletePortMapping"
	MethodGetPortMapping    = "GetPortMapping"
	MethodListPortMappings  = "ListPortMappings"
	MethodExternalIP        = "ExternalIP"
	MethodLocalAddr         = "LocalAddr"
)

// Call is one call the router received, as recorded in its call log and as
// passed to hooks.
type Call struct {
	// Method is the igd.Client method name (through a Client) or the SOAP
	// action name (through a Server).
	Method string
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
	// GetGenericPortMappingEntry) returned. A hook that handles a get call
	// sets it to the mapping to return.
	Mapping igd.Mapping
	// Mappings is what ListPortMappings (or GetListOfPortMappings) returned.
	// A hook that handles a list call sets it to the list to return.
	Mappings []igd.Mapping
	// Addr is what ExternalIP (or GetExternalIPAddress) or LocalAddr
	// returned. A hook that handles such a call sets it to the address to
	// return.
	Addr netip.Addr
	// Err is the error the call returned (nil when a hook sees the call).
	Err error
}

// clone returns a copy of c that shares no memory with it.
func (c Call) clone() Call {
	c.Mappings = slices.Clone(c.Mappings)
	return c
}

// Hook intercepts calls of one method before they reach the table. Hooks run
// in order, the most recently added first, outside the router's lock, so a
// hook may block (it should honour ctx). When a hook returns handled, the
// call returns err and, for methods that return a value, the value the hook
// left in call (Mapping, Mappings or Addr); later hooks and the table are
// skipped. When it returns !handled the next hook runs, then the table; err
// is ignored then. A hook may change call.Mapping of an AddPortMapping call
// before passing it on: the changed mapping is what gets stored.
type Hook func(ctx context.Context, call *Call) (handled bool, err error)

// PrependHook adds h in front of the hooks for method (see the Method
// constants; through a Server, any SOAP action name).
func (r *Router) PrependHook(method string, h Hook) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hooks[method] = append([]Hook{h}, r.hooks[method]...)
}

// ClearHooks removes every hook.
func (r *Router) ClearHooks() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.hooks)
}

// Fail makes every call of method fail with err.
func (r *Router) Fail(method string, err error) { r.PrependHook(method, ErrorHook(err)) }

// FailNth makes the nth call (counting from 1, from now on) of method fail
// with err; the calls before and after it are unaffected. For example
// r.FailNth(fake.MethodAddPortMapping, 3, err) fails the third
// AddPortMapping.
func (r *Router) FailNth(method string, n int, err error) {
	r.PrependHook(method, NthHook(n, ErrorHook(err)))
}

// Delay makes every call of method wait d (real time) first, or until its
// context ends, in which case the call returns the context's error.
func (r *Router) Delay(method string, d time.Duration) { r.PrependHook(method, DelayHook(d)) }

// ErrorHook returns a hook that handles every call with err. Pass a
// *igd.UPnPError to simulate a router answer (a Server turns it into a SOAP
// fault with its code; other errors become 501 ActionFailed).
func ErrorHook(err error) Hook {
	return func(context.Context, *Call) (bool, error) { return true, err }
}

// NthHook returns a hook that runs h on the nth call it sees (counting from
// 1) and passes every other call on.
func NthHook(n int, h Hook) Hook {
	var seen atomic.Int64
	return func(ctx context.Context, call *Call) (bool, error) {
		if seen.Add(1) != int64(n) {
			return false, nil
		}
		return h(ctx, call)
	}
}

// DelayHook returns a hook that waits d (real time) and passes the call on,
// or handles it with the context's error if ctx ends first.
func DelayHook(d time.Duration) Hook {
	return func(ctx context.Context, _ *Call) (bool, error) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return false, nil
		case <-ctx.Done():
			return true, ctx.Err()
		}
	}
}

// BlockHook returns a hook that waits until release is closed and passes the
// call on, or handles it with the context's error if ctx ends first. It lets
// a test hold a call in flight deterministically.
func BlockHook(release <-chan struct{}) Hook {
	return func(ctx context.Context, _ *Call) (bool, error) {
		select {
		case <-release:
			return false, nil
		case <-ctx.Done():
			return true, ctx.Err()
		}
	}
}

// runHooks runs the hooks for call.Method. It reports whether one handled
// the call, and with which error.
func (r *Router) runHooks(ctx context.Context, call *Call) (bool, error) {
	r.mu.Lock()
	hooks := slices.Clone(r.hooks[call.Method])
	r.mu.Unlock()
	for _, h := range hooks {
		if handled, err := h(ctx, call); handled {
			return true, err
		}
	}
	return false, nil
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

// CallCount returns how many calls of method the log holds.
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
