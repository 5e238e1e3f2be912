// This file is the family step of the pipeline (pipeline.go's
// serveFamilies): which of a Service's IP families are served, and the
// Warning event of one that is not. IPv4 is the router's port mappings;
// IPv6 is pinholes (pinholes.go).

package loadbalancer

// EventReasonIPFamilyNotServed is a Warning's: one of a Service's IP families
// cannot be served (the message names it and why) while the other is.
const EventReasonIPFamilyNotServed = "IPFamilyNotServed"
