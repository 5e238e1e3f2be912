//go:build !unix

package pcpwire

import "syscall"

func reuseAddr(network, address string, rc syscall.RawConn) error { return nil }
