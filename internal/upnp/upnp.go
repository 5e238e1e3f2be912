// Package upnp holds the UPnP IGD facts that ccmkit's own packages (igd,
// the fake router, the conformance suites, routercheck, the load balancer)
// share and a CCM author does not need: the error codes igd gives meaning
// to, the connection service types it speaks, the widest listing every
// router answers safely, and how a root description is read and a
// service's SOAP client made (igd's and igd/pinhole's, for the same
// routers). A CCM author branches on igd's sentinel errors, or
// reads a code with igd.Code.
package upnp

import "github.com/huin/goupnp/dcps/internetgateway2"

// UPnP error codes igd gives meaning to (UPnP Device Architecture and
// WANIPConnection:2). igd's sentinels stand for 606, 713, 714, 718, 724,
// 725 and 728.
const (
	// CodeInvalidAction is 401 Invalid Action: the service has no such
	// action.
	CodeInvalidAction = 401
	// CodeInvalidArgs is 402 Invalid Args.
	CodeInvalidArgs = 402
	// CodeActionFailed is 501 Action Failed.
	CodeActionFailed = 501
	// CodeOptionalActionNotImpl is 602 Optional Action Not Implemented.
	CodeOptionalActionNotImpl = 602
	// CodeNotAuthorized is 606 Action not authorized (igd.ErrNotAuthorized).
	CodeNotAuthorized = 606
	// CodeInvalidArrayIndex is 713 SpecifiedArrayIndexInvalid
	// (igd.ErrInvalidArrayIndex).
	CodeInvalidArrayIndex = 713
	// CodeNoSuchEntry is 714 NoSuchEntryInArray (igd.ErrNoSuchEntry).
	CodeNoSuchEntry = 714
	// CodeWildCardNotPermittedInExt is 716 WildCardNotPermittedInExtPort.
	CodeWildCardNotPermittedInExt = 716
	// CodeConflict is 718 ConflictInMappingEntry (igd.ErrConflict).
	CodeConflict = 718
	// CodeSamePortValuesRequired is 724 SamePortValuesRequired
	// (igd.ErrSamePortValuesRequired).
	CodeSamePortValuesRequired = 724
	// CodeOnlyPermanentLeases is 725 OnlyPermanentLeasesSupported
	// (igd.ErrOnlyPermanentLeases).
	CodeOnlyPermanentLeases = 725
	// CodeNoPortMapsAvailable is 728 NoPortMapsAvailable
	// (igd.ErrNoPortMapsAvailable).
	CodeNoPortMapsAvailable = 728
	// CodePortMappingNotFound is 730 PortMappingNotFound.
	CodePortMappingNotFound = 730
)

// The UPnP service types igd speaks, in the order discovery prefers them
// when one device offers several.
const (
	// ServiceWANIPConnection2 is the IGD:2 connection service. It is the only
	// one with GetListOfPortMappings. miniupnpd's IGD:2 description holds only
	// this type.
	ServiceWANIPConnection2 = internetgateway2.URN_WANIPConnection_2
	// ServiceWANIPConnection1 is the IGD:1 connection service most routers
	// expose (miniupnpd with force_igd_desc_v1=yes, many consumer routers).
	ServiceWANIPConnection1 = internetgateway2.URN_WANIPConnection_1
	// ServiceWANPPPConnection1 is the connection service of routers that dial
	// the internet over PPPoE (many DSL routers expose only this one).
	ServiceWANPPPConnection1 = internetgateway2.URN_WANPPPConnection_1
)

// SafeListWidth is the widest range of external ports that is safe to list
// in one GetListOfPortMappings call on every router, including those whose
// daemon dies on longer listings (see igd/DESIGN.md). igd's
// UPnPClient.ListPortMappings lists a range this narrow in one call; on
// such a router it lists a wider one in guarded parts
// (igd.Gateway.GuardedListing).
const SafeListWidth = 128
