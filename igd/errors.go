package igd

import (
	"errors"
	"fmt"
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
	// ErrNoGateway means no usable Internet Gateway Device was found.
	ErrNoGateway = errors.New("igd: no gateway found")
	// ErrInvalidMapping is matched by every *FieldError from Mapping.Validate.
	ErrInvalidMapping = errors.New("igd: invalid mapping")
)

// UPnP error codes this package gives meaning to.
const (
	CodeInvalidArgs               = 402
	CodeActionFailed              = 501
	CodeNotAuthorized             = 606
	CodeInvalidArrayIndex         = 713
	CodeNoSuchEntry               = 714
	CodeWildCardNotPermittedInSrc = 715
	CodeWildCardNotPermittedInExt = 716
	CodeConflict                  = 718
	CodeSamePortValuesRequired    = 724
	CodeOnlyPermanentLeases       = 725
	CodeRemoteHostOnlyWildcard    = 726
	CodeExternalPortOnlyWildcard  = 727
	CodeNoPortMapsAvailable       = 728
	CodeConflictWithOtherMech     = 729
	CodeWildCardNotPermittedInInt = 732
)

var codeSentinels = map[int]error{
	CodeNotAuthorized:          ErrNotAuthorized,
	CodeInvalidArrayIndex:      ErrInvalidArrayIndex,
	CodeNoSuchEntry:            ErrNoSuchEntry,
	CodeConflict:               ErrConflict,
	CodeSamePortValuesRequired: ErrSamePortValuesRequired,
	CodeOnlyPermanentLeases:    ErrOnlyPermanentLeases,
	CodeNoPortMapsAvailable:    ErrNoPortMapsAvailable,
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

func (e *UPnPError) Error() string {
	return fmt.Sprintf("igd: %s: UPnP error %d %s", e.Action, e.Code, e.Description)
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
