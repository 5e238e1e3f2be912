package loadbalancer

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"

	"github.com/ccmkit/ccmkit/igd"
)

// Description format, version 1 (see the package documentation).
const (
	formatV1 = "ck1" // the first field of every description this package writes
	// maxReadableOwner is the longest owner written out in full: with the
	// marker, two spaces and the longest port name, it fits.
	maxReadableOwner = igd.MaxDescriptionLen - len(formatV1) - 2 - maxPortNameLen
	maxPortNameLen   = 15  // the longest Kubernetes port name (an IANA_SVC_NAME)
	hashLen          = 20  // base32 characters of a hashed owner (100 bits)
	unnamedPort      = "-" // the empty name of a Service's only port
)

var hashEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// owner identifies the Service a mapping belongs to. Its token is what
// descriptions carry and GetLoadBalancerName returns.
type owner struct {
	cluster, namespace, name string
	token                    string
}

// newOwner returns the owner of Service namespace/name in cluster.
func newOwner(cluster, namespace, name string) owner {
	return owner{cluster: cluster, namespace: namespace, name: name, token: ownerToken(cluster, namespace, name)}
}

// key is the Service's "namespace/name", for messages and maps.
func (o owner) key() string { return o.namespace + "/" + o.name }

// ownerToken is "cluster/namespace/name" when that is short enough and made of
// safe characters, otherwise "#" and 20 base32 characters of its SHA-256.
func ownerToken(cluster, namespace, name string) string {
	full := cluster + "/" + namespace + "/" + name
	if len(full) <= maxReadableOwner && safeToken(cluster) && safeToken(namespace) && safeToken(name) {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	return "#" + strings.ToLower(hashEncoding.EncodeToString(sum[:]))[:hashLen]
}

// safeToken reports whether s is non-empty and made only of characters that
// cannot be confused with separators.
func safeToken(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_')
	})
}

// description returns the description of o's mapping for the Service port
// named portName ("" for the only, unnamed port).
func (o owner) description(portName string) string {
	if portName == "" || len(portName) > maxPortNameLen || !safeToken(portName) {
		portName = unnamedPort
	}
	d := formatV1 + " " + o.token + " " + portName
	if strings.HasPrefix(o.token, "#") {
		// For people reading the router's table; never parsed.
		if hint, room := o.key(), igd.MaxDescriptionLen-len(d)-1; room > 0 {
			d += " " + hint[:min(len(hint), room)]
		}
	}
	return d
}

// parsedDescription is what a description says about its owner.
type parsedDescription struct {
	token string // owner token
}

// parseDescription reads a description of any known format (else ok is
// false). A router cutting descriptions short may leave "ck1 <owner> ": the
// space proves the owner whole, so that still names it (a cut owner does not).
func parseDescription(d string) (p parsedDescription, ok bool) {
	f := strings.Split(d, " ")
	if len(f) < 3 || f[0] != formatV1 || f[1] == "" || (f[2] == "" && len(f) > 3) {
		return parsedDescription{}, false
	}
	return parsedDescription{token: f[1]}, true
}
