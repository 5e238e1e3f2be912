package pcpwire

import (
	"errors"
	"io"
	"net/netip"
)

func parseIPv6Route(r io.Reader, name string) (netip.Addr, error) {
	return netip.Addr{}, errors.New("not implemented")
}
