package node

import (
	"context"
	"net"
)

// listenClients opens a TCP listener for clients' connections (the plain
// and the TLS fronts) without TCP keepalive probes.
//
// Go's default listener turns probes on for every connection it accepts,
// with four setsockopt system calls (SO_KEEPALIVE and the three timers):
// of the seven system calls a new TLS connection costs edge before its
// first read, four. Probes find a peer that vanished from an idle
// connection; every client connection here is already bounded by
// limits.idle_timeout between requests, limits.read_header_timeout and the
// body deadline while reading, and limits.write_timeout while writing, so
// they would find nothing those do not end first. nginx's default
// (listen ... so_keepalive=off) is the same. The cluster and admin
// listeners keep Go's default: they accept rarely.
func listenClients(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	return lc.Listen(context.Background(), "tcp", addr)
}
