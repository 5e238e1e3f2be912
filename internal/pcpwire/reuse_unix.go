//go:build unix

package pcpwire

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// reuseAddr sets SO_REUSEADDR, so that several ANNOUNCE listeners on one
// host can bind 224.0.0.1:5350.
func reuseAddr(network, address string, rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	}); err != nil {
		return err
	}
	return serr
}
