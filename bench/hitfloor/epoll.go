package main

// The epoll floor: one event loop per P, each on a locked OS thread with
// its own SO_REUSEPORT listening socket and epoll set, answering every
// complete GET in what one read brought with one write, no goroutine per
// connection and no netpoller. It bounds what an event-loop hit path (the
// model nginx and gnet use) could reach on this machine beside the
// goroutine-per-connection raw floor.

import (
	"bytes"
	"log"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
)

func serveEpoll(listen string, date *atomic.Pointer[[]byte]) {
	addr, err := net.ResolveTCPAddr("tcp4", listen)
	if err != nil {
		log.Fatal(err)
	}
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		lfd := reusePortListener(addr)
		go epollLoop(lfd, date)
	}
	select {}
}

func reusePortListener(addr *net.TCPAddr) int {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		log.Fatal(err)
	}
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, 0xf /* SO_REUSEPORT */, 1)
	sa := &syscall.SockaddrInet4{Port: addr.Port}
	copy(sa.Addr[:], addr.IP.To4())
	if err := syscall.Bind(fd, sa); err != nil {
		log.Fatal(err)
	}
	if err := syscall.Listen(fd, 1024); err != nil {
		log.Fatal(err)
	}
	return fd
}

func epollLoop(lfd int, date *atomic.Pointer[[]byte]) {
	runtime.LockOSThread()
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		log.Fatal(err)
	}
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, lfd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(lfd)}); err != nil {
		log.Fatal(err)
	}
	events := make([]syscall.EpollEvent, 256)
	in := make([]byte, 64<<10)
	out := make([]byte, 0, 64<<10)
	for {
		n, err := syscall.EpollWait(ep, events, -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			log.Fatal(err)
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == lfd {
				for {
					cfd, _, err := syscall.Accept4(lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
					if err != nil {
						break
					}
					_ = syscall.SetsockoptInt(cfd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
					_ = syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, cfd, &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(cfd)})
				}
				continue
			}
			r, err := syscall.Read(fd, in)
			if r <= 0 {
				if err == syscall.EAGAIN {
					continue
				}
				_ = syscall.Close(fd) // also leaves the epoll set
				continue
			}
			// Every complete request in what came; a floor assumes a
			// request never spans two reads (wrk's never do).
			out = out[:0]
			req, closeAfter := in[:r], false
			for {
				end := bytes.Index(req, []byte("\r\n\r\n"))
				if end < 0 {
					break
				}
				if !bytes.HasPrefix(req, []byte("GET ")) {
					closeAfter = true
					break
				}
				if bytes.Contains(req[:end], []byte("onnection: close")) {
					closeAfter = true
				}
				out = appendAnswer(out, date)
				req = req[end+4:]
			}
			for len(out) > 0 {
				w, err := syscall.Write(fd, out)
				if err != nil {
					closeAfter = true // a floor does not wait for a full socket buffer
					break
				}
				out = out[w:]
			}
			if closeAfter {
				_ = syscall.Close(fd)
			}
		}
	}
}
