// Package igderr holds the typed errors behind three of igd's sentinels,
// which igd returns and ccmkit's own packages (the fake router, the
// conformance suites, routercheck) build or read: FieldError
// (igd.ErrInvalidMapping), ExternalIPError (igd.ErrInvalidExternalIP) and
// NoGatewayError (igd.ErrNoGateway). igd's sentinels are this package's, so
// errors.Is matches either name. A CCM author branches on the sentinels;
// each error's message carries its data.
package igderr

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The sentinels igd exports under the same names.
var (
	// ErrNoGateway is igd.ErrNoGateway: no usable Internet Gateway Device
	// was found.
	ErrNoGateway = errors.New("igd: no gateway found")
	// ErrInvalidMapping is igd.ErrInvalidMapping, matched by every
	// *FieldError.
	ErrInvalidMapping = errors.New("igd: invalid mapping")
	// ErrInvalidExternalIP is igd.ErrInvalidExternalIP, matched by every
	// *ExternalIPError.
	ErrInvalidExternalIP = errors.New("igd: invalid external IP address")
)

// FieldError reports a Mapping field (or a request field of another
// protocol's client) that a router would refuse or misread. It matches
// ErrInvalidMapping.
type FieldError struct {
	// Field is the Go field name, for example "ExternalPort".
	Field string
	// Value is the offending value as text.
	Value string
	// Reason says what is wrong.
	Reason string
}

// Error names the field, its value and what is wrong with it.
func (e *FieldError) Error() string {
	return fmt.Sprintf("igd: invalid mapping field %s=%s: %s", e.Field, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidMapping) true for every FieldError.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidMapping }

// NoGatewayError reports a discovery that found no usable router: what it
// looked for, everything it found (igd.Candidate, a type parameter only
// because igd imports this package) and why each was rejected. It matches
// ErrNoGateway, and unwraps to the context's error when the caller's context
// ended the discovery.
type NoGatewayError[C fmt.Stringer] struct {
	// Searched says how discovery looked: "SSDP search" or
	// "root description URL".
	Searched string
	// Timeout is the discovery bound that was in force.
	Timeout time.Duration
	// Found lists every service discovery saw, each with its Rejected reason.
	Found []C
	// Err is what ended discovery early or kept it from accepting any
	// router, if anything: the caller's context error, the error that kept
	// the search from being sent, or why the host has no default gateway
	// (then every answer is listed, none probed).
	Err error
}

// Error lists what was found and why each candidate was rejected.
func (e *NoGatewayError[C]) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "igd: no gateway found by %s within %s", e.Searched, e.Timeout)
	if len(e.Found) == 0 {
		b.WriteString(": no device answered")
	} else {
		fmt.Fprintf(&b, ": found %d, none usable: ", len(e.Found))
		for i, c := range e.Found {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(c.String())
		}
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrNoGateway) true.
func (e *NoGatewayError[C]) Is(target error) bool { return target == ErrNoGateway }

// Unwrap returns what ended discovery early, if anything.
func (e *NoGatewayError[C]) Unwrap() error { return e.Err }

// ExternalIPError reports a router external address that cannot be used: an
// answer to GetExternalIPAddress that is no IPv4 host address. It matches
// ErrInvalidExternalIP. An address that is valid but not public is no error
// (the client returns it; see igd.IsPublic).
type ExternalIPError struct {
	// Value is what the router answered.
	Value string
	// Reason says what is wrong with it.
	Reason string
}

// Error quotes the answer and says what is wrong with it. It has no "igd:"
// prefix: callers wrap it with the operation and the router.
func (e *ExternalIPError) Error() string {
	return fmt.Sprintf("router answered GetExternalIPAddress with %q: %s", e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidExternalIP) true.
func (e *ExternalIPError) Is(target error) bool { return target == ErrInvalidExternalIP }
