package pcpwire

import (
	"errors"
	"fmt"
	"time"

	"github.com/ccmkit/ccmkit/igd"
)

// ResultCode is a PCP result code (RFC 6887 §7.4).
type ResultCode uint8

// The result codes of RFC 6887 §7.4.
const (
	Success               ResultCode = 0
	UnsuppVersion         ResultCode = 1
	NotAuthorized         ResultCode = 2
	MalformedRequest      ResultCode = 3
	UnsuppOpcode          ResultCode = 4
	UnsuppOption          ResultCode = 5
	MalformedOption       ResultCode = 6
	NetworkFailure        ResultCode = 7
	NoResources           ResultCode = 8
	UnsuppProtocol        ResultCode = 9
	UserExQuota           ResultCode = 10
	CannotProvideExternal ResultCode = 11
	AddressMismatch       ResultCode = 12
	ExcessiveRemotePeers  ResultCode = 13
)

var codeNames = [...]string{
	"SUCCESS", "UNSUPP_VERSION", "NOT_AUTHORIZED", "MALFORMED_REQUEST",
	"UNSUPP_OPCODE", "UNSUPP_OPTION", "MALFORMED_OPTION", "NETWORK_FAILURE",
	"NO_RESOURCES", "UNSUPP_PROTOCOL", "USER_EX_QUOTA",
	"CANNOT_PROVIDE_EXTERNAL", "ADDRESS_MISMATCH", "EXCESSIVE_REMOTE_PEERS",
}

// String returns the RFC's name of c, such as "NOT_AUTHORIZED", or
// "result code N" for a code the RFC does not name.
func (c ResultCode) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("result code %d", uint8(c))
}

// Sentinel errors that callers branch on with errors.Is. A *ResultError with
// the matching code is each of them. ErrCannotProvideExternal also matches
// igd.ErrPortUnavailable, and ErrUnsupportedOption igd.ErrThirdPartyRefused:
// a caller that knows only igd (the load balancer) recognises them.
var (
	// ErrNotAuthorized is NOT_AUTHORIZED: the server's policy refuses the
	// request. miniupnpd answers it to a delete whose nonce is not the one
	// that created the mapping, and to a MAP without PREFER_FAILURE when
	// its permission rules allow no external port at all (a refused port
	// under PREFER_FAILURE is ErrCannotProvideExternal).
	ErrNotAuthorized = errors.New("pcp: not authorized (NOT_AUTHORIZED)")
	// ErrCannotProvideExternal is CANNOT_PROVIDE_EXTERNAL: with
	// PreferFailure, the suggested external port (or address) is not
	// available; miniupnpd 2.3.1 answers it to a port its permission rules
	// refuse (see Backend.AddFor).
	ErrCannotProvideExternal error = &igdSentinel{msg: "pcp: cannot provide the suggested external port (CANNOT_PROVIDE_EXTERNAL)", igd: igd.ErrPortUnavailable}
	// ErrUnsupportedOption is UNSUPP_OPTION: the server does not accept an
	// option the request carried; on miniupnpd, THIRD_PARTY when
	// pcp_allow_thirdparty is off.
	ErrUnsupportedOption error = &igdSentinel{msg: "pcp: unsupported option (UNSUPP_OPTION)", igd: igd.ErrThirdPartyRefused}
	// ErrNoResources is NO_RESOURCES: the server cannot create the mapping
	// now (table full, no free port). miniupnpd also answers it to a delete
	// that finds no mapping.
	ErrNoResources = errors.New("pcp: no resources (NO_RESOURCES)")
	// ErrNetworkFailure is NETWORK_FAILURE: the server has no usable
	// external address at the moment.
	ErrNetworkFailure = errors.New("pcp: network failure (NETWORK_FAILURE)")
	// ErrAddressMismatch is ADDRESS_MISMATCH: the request's source address
	// is not the client address it carried, so a NAT sits between this
	// host and the server.
	ErrAddressMismatch = errors.New("pcp: address mismatch (ADDRESS_MISMATCH)")
	// ErrUnsupportedVersion is UNSUPP_VERSION: the server does not speak
	// PCP version 2 (a NAT-PMP-only router answers so).
	ErrUnsupportedVersion = errors.New("pcp: unsupported version (UNSUPP_VERSION)")
)

// igdSentinel is a sentinel of this package that igd names too: errors.Is
// matches it, and the igd sentinel of the same condition.
type igdSentinel struct {
	msg string
	igd error
}

// Error is the sentinel's own message.
func (e *igdSentinel) Error() string { return e.msg }

// Is matches the igd sentinel of the same condition.
func (e *igdSentinel) Is(target error) bool { return target == e.igd }

var codeSentinels = map[ResultCode]error{
	NotAuthorized:         ErrNotAuthorized,
	CannotProvideExternal: ErrCannotProvideExternal,
	UnsuppOption:          ErrUnsupportedOption,
	NoResources:           ErrNoResources,
	NetworkFailure:        ErrNetworkFailure,
	AddressMismatch:       ErrAddressMismatch,
	UnsuppVersion:         ErrUnsupportedVersion,
}

// ResultError is an answer from the server with a result code other than
// SUCCESS.
type ResultError struct {
	// Op is the operation: "map" or "delete".
	Op string
	// Code is the result code the server answered.
	Code ResultCode
	// Lifetime is how long the server says the error holds (RFC 6887
	// §7.2): 0 for a refusal that will not change by itself, 30 s on
	// miniupnpd for NO_RESOURCES and NETWORK_FAILURE.
	Lifetime time.Duration
}

// Error names the operation and the code.
func (e *ResultError) Error() string {
	return fmt.Sprintf("pcp: %s: server answered %s", e.Op, e.Code)
}

// Is makes errors.Is(err, ErrNotAuthorized) and the other sentinels true for
// a ResultError with the matching code (and the igd sentinels they match),
// and errors.Is(err, igd.ErrRefused) true for every ResultError.
func (e *ResultError) Is(target error) bool {
	if target == igd.ErrRefused {
		return true
	}
	s, ok := codeSentinels[e.Code]
	return ok && errors.Is(s, target)
}
