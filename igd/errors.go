package igd

import (
	"errors"
	"fmt"
	"github.com/ccmkit/ccmkit/internal/igderr"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// Sentinel errors that callers branch on with errors.Is. Errors returned by a
// router carry a *UPnPError whose Is method maps the UPnP code to these.
var (
	// ErrInvalidArrayIndex is UPnP 713 SpecifiedArrayIndexInvalid: the end
	// of the table when listing it entry by entry.
	ErrInvalidArrayIndex = errors.New("igd: specified array index invalid (713)")
	// ErrNoSuchEntry is UPnP 714 NoSuchEntryInArray.
	ErrNoSuchEntry = errors.New("igd: no such port mapping (714)")
	// ErrConflict is UPnP 718 ConflictInMappingEntry: another internal client
	// holds the external port. A router in secure mode also answers 718 when a
	// host asks to map to an address other than its own.
	ErrConflict = errors.New("igd: conflict in mapping entry (718)")
	// ErrSamePortValuesRequired is UPnP 724: the router requires the internal
	// and external ports to be equal.
	ErrSamePortValuesRequired = errors.New("igd: same port values required (724)")
	// ErrOnlyPermanentLeases is UPnP 725 OnlyPermanentLeasesSupported.
	ErrOnlyPermanentLeases = errors.New("igd: only permanent leases supported (725)")
	// ErrNotAuthorized is UPnP 606 Action not authorized: the router's policy
	// forbids the mapping (a port outside its allow rules, or another host's
	// mapping in secure mode).
	ErrNotAuthorized = errors.New("igd: action not authorized (606)")
	// ErrNoPortMapsAvailable is UPnP 728: the router's table is full.
	ErrNoPortMapsAvailable = errors.New("igd: no port maps available (728)")
	// ErrNoGateway means no usable Internet Gateway Device was found. The
	// error lists what discovery looked for, everything it found and why
	// each was rejected, and unwraps to the context's error when the
	// caller's context ended the discovery.
	ErrNoGateway = igderr.ErrNoGateway
	// ErrNotSupported means the router (or the client) cannot do what was
	// asked, for example list its table in one call; it matches
	// errors.ErrUnsupported too.
	ErrNotSupported = fmt.Errorf("igd: not supported by the router: %w", errors.ErrUnsupported)
	// ErrRefused is matched by an error a GuardedClient returns when its
	// router answered the request with a refusal of its own protocol
	// (igd/pcp: a PCP result code other than SUCCESS), as opposed to not
	// answering it. A UPnP router's refusals are *UPnPError faults, told
	// apart by Code, and do not match it.
	ErrRefused = errors.New("igd: refused by the router")
	// ErrPortUnavailable is matched by an error of a GuardedClient's AddFor
	// when the router cannot give the external port asked for and mapped
	// nothing (PCP's CANNOT_PROVIDE_EXTERNAL under PREFER_FAILURE): another
	// mapping holds the port (the error also matches ErrConflict) or the
	// router's rules refuse it (it also matches ErrNotAuthorized).
	ErrPortUnavailable = errors.New("igd: external port not available")
	// ErrThirdPartyRefused is matched by an error of a GuardedClient when
	// its router does not take an option of the request, which for a
	// mapping to another host than this one is THIRD_PARTY (PCP's
	// UNSUPP_OPTION; miniupnpd with pcp_allow_thirdparty off): such a
	// router maps, and deletes, only for this host (see SelfOnlyReporter).
	ErrThirdPartyRefused = errors.New("igd: the router refuses to map for another host")
	// ErrInvalidMapping is matched by every error of Mapping.Validate, whose
	// message names the field, its value and what is wrong with it.
	ErrInvalidMapping = igderr.ErrInvalidMapping
	// ErrAnswerTooLarge is matched by every *answerTooLargeError: an answer
	// from a router or LAN host was larger than the client reads.
	ErrAnswerTooLarge = errors.New("igd: answer too large")
	// ErrInvalidExternalIP is matched by an error whose router answered
	// GetExternalIPAddress with something that is no usable IPv4 host
	// address; the message quotes the answer. An address that is valid but
	// not public is no error (see IsPublic).
	ErrInvalidExternalIP = igderr.ErrInvalidExternalIP
)

var codeSentinels = map[int]error{
	upnp.CodeNotAuthorized:          ErrNotAuthorized,
	upnp.CodeInvalidArrayIndex:      ErrInvalidArrayIndex,
	upnp.CodeNoSuchEntry:            ErrNoSuchEntry,
	upnp.CodeConflict:               ErrConflict,
	upnp.CodeSamePortValuesRequired: ErrSamePortValuesRequired,
	upnp.CodeOnlyPermanentLeases:    ErrOnlyPermanentLeases,
	upnp.CodeNoPortMapsAvailable:    ErrNoPortMapsAvailable,
}

// UPnPError is an error answer (a SOAP fault) from the router.
type UPnPError struct {
	// Action is the SOAP action, for example "AddPortMapping".
	Action string
	// Code is the UPnP error code, for example 718.
	Code int
	// Description is the router's text for the code.
	Description string
	// Err is the underlying transport or SOAP error, if any.
	Err error
}

// Error names the action, the code and the router's description of it. It
// has no "igd:" prefix: callers wrap it with the operation and the object.
func (e *UPnPError) Error() string {
	return fmt.Sprintf("router answered %s with UPnP error %d %s", e.Action, e.Code, e.Description)
}

// Unwrap returns the underlying SOAP error.
func (e *UPnPError) Unwrap() error { return e.Err }

// Is reports whether the UPnP code of e is the one target stands for, so that
// errors.Is(err, ErrConflict) holds for a 718 answer.
func (e *UPnPError) Is(target error) bool {
	s, ok := codeSentinels[e.Code]
	return ok && s == target
}

// Code returns the UPnP error code carried by err, or 0 if err is not (or
// does not wrap) a *UPnPError.
func Code(err error) int {
	var ue *UPnPError
	if errors.As(err, &ue) {
		return ue.Code
	}
	return 0
}

// noGatewayError is the error of a discovery that found no usable router.
type noGatewayError = igderr.NoGatewayError[Candidate]
