package pcpwire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/ccmkit/ccmkit/igd"
)

// NonceFor derives the PCP mapping nonce of one owner's mapping for key:
// the first 12 bytes of HMAC-SHA256 under secret of a domain-separated,
// length-prefixed encoding of owner, key.Protocol and key.ExternalPort.
//
// Every process that holds secret (the replicas of one cluster's
// controller, or a controller before and after a restart) derives the same
// nonce for the same owner and key, so any of them can renew or delete the
// mapping, and none needs to store the nonce. A LAN host without secret
// cannot compute it: to it the nonce is 96 random bits, which is what
// guards a PCP delete (and nothing else; see the package documentation).
// The nonce travels in clear text in every request, so a host that can see
// the traffic between this host and the router learns it.
//
// secret should be at least 32 random bytes kept like any other cluster
// credential. owner names the holder (for example a Service's namespace/name
// and UID); key is the mapping's external protocol and port.
func NonceFor(secret []byte, owner string, key igd.Key) [12]byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("ccmkit pcp nonce v1\x00"))
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(owner)))
	h.Write(n[:])
	h.Write([]byte(owner))
	binary.BigEndian.PutUint32(n[:], uint32(len(key.Protocol)))
	h.Write(n[:])
	h.Write([]byte(key.Protocol))
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], key.ExternalPort)
	h.Write(port[:])
	var nonce [12]byte
	copy(nonce[:], h.Sum(nil))
	return nonce
}

// Description returns the description miniupnpd stores for a PCP mapping
// with nonce on a router of byte order order: igd.PCPDescriptionPrefix and
// the nonce's three 32-bit words, each as 8 hex digits.
func Description(nonce [12]byte, order binary.ByteOrder) string {
	return fmt.Sprintf("%s%08x%08x%08x", igd.PCPDescriptionPrefix, order.Uint32(nonce[0:]), order.Uint32(nonce[4:]), order.Uint32(nonce[8:]))
}
