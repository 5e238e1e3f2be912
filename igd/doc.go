// Package igd manages port mappings on a home or edge router, an Internet
// Gateway Device (IGD) spoken to over UPnP.
//
// Client is the small interface the load balancer and consumers' code depend
// on. Mapping is one entry of the router's table; Validate checks it before it
// is sent. Errors that come from the router are *UPnPError values that match
// the sentinels (ErrConflict, ErrNoSuchEntry, …) with errors.Is.
package igd
