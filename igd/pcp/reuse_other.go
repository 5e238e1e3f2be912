//go:build !unix

package pcp

import "syscall"

func reuseAddr(network, address string, rc syscall.RawConn) error { return nil }
