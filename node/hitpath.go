package node

import (
	"bytes"
	"net"
	"strings"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/hitpath"
	"github.com/edgecache/edge/proxy"
)

// hitFront answers a listener's HTTP/1.1 hit path (tuning.hit_path) the
// way the net/http front would: the site table, the TLS front's rules
// (ACME paths on the plain listener; Alt-Svc and HSTS on the TLS one) and
// the access log first, then the proxy. Whatever it declines goes to
// net/http with the connection.
type hitFront struct {
	n       *Node
	acme    bool               // ACME HTTP-01 answers live on this (plain) listener
	proto   prometheus.Counter // edge_http_requests_by_protocol_total's count of this front's protocol
	h2      bool               // HTTP/2 connections (package h2server), not HTTP/1.1
	tls     bool               // the TLS listener: the key's scheme is https
	front   *proxy.FrontFields // fields the TLS front adds to every answer (nil: none)
	release func(*hitpath.Answer)
}

// newHitFront returns the node's answerer; its release method value is
// made once, so that answers carry it without an allocation.
func newHitFront(n *Node) *hitFront {
	f := &hitFront{n: n}
	f.release = f.releaseAnswer
	return f
}

// releaseAnswer gives back what an answer held (an entry pinned while its
// body was written, a per-client slot).
func (f *hitFront) releaseAnswer(a *hitpath.Answer) {
	e, _ := a.Ref.(*proxy.Entry)
	f.n.proxy.ReleaseHit(e, a.RefKey)
}

// acmePrefix is where HTTP-01 challenges are asked.
var acmePrefix = []byte("/.well-known/acme-challenge/")

// AppendHit implements hitpath.Answerer.
func (f *hitFront) AppendHit(dst []byte, r *hitpath.Request, date []byte, remote net.Addr, a *hitpath.Answer) (answered bool) {
	n := f.n
	if f.acme && (bytes.HasPrefix(r.Target, acmePrefix) || bytes.IndexByte(r.Target, '%') >= 0) {
		// The challenge handler matches the decoded path: an escaped
		// spelling of the prefix is its too.
		return false
	}
	start := time.Now()
	// Views of the request's bytes, valid during this call: what outlives
	// it (the access log's entry) is copied below.
	host, ok := proxy.CanonicalHost(unsafe.String(unsafe.SliceData(r.Host), len(r.Host)))
	if !ok {
		return false // net/http answers 400
	}
	if r.ServerName != "" && !strings.EqualFold(host, r.ServerName) {
		// Another host than the handshake's (a connection a client
		// coalesced, or domain fronting): the front judges it by the
		// connection's certificate (tlsFront.misdirected).
		return false
	}
	s := n.sites.Load().lookupCanonical(host)
	if s == nil {
		return false // net/http answers 421
	}
	if s.limiter != nil {
		if s.limiter.header != "" {
			return false // keyed on a header this path does not keep
		}
		// A token is taken before the answer and given back if this path
		// does not answer: the net/http front then takes its own (or
		// refuses the request, 429). Taking it first means two hits on
		// two connections cannot both spend the last one.
		undo, ok := s.limiter.take(s.limiter.clientOf(remote.String(), nil), start)
		if !ok {
			return false
		}
		defer func() {
			if !answered {
				undo()
			}
		}()
	}
	target := unsafe.String(unsafe.SliceData(r.Target), len(r.Target))
	path, query, _ := strings.Cut(target, "?")
	hr := proxy.HitRequest{Head: r.Head, Host: host, Path: path, RawQuery: query, Accept: r.AcceptEncodingStrings(), Remote: remote,
		Close: r.Close, Site: s.resolved, TLS: f.tls, Front: f.front, Dropped: r.Dropped, Forwarding: r.Forwarding}
	var ans proxy.HitAnswer
	if !n.proxy.AppendHit(dst, &hr, date, &ans) {
		return false
	}
	answered = true
	a.Head, a.Body = ans.Head, ans.Body
	a.Release, a.RefKey = f.release, ans.ClientIP // always: the request is in flight until then
	if ans.Pinned != nil {
		a.Ref = ans.Pinned
	}
	s.requests.Inc()
	if f.proto != nil {
		f.proto.Inc()
	}
	if n.access != nil {
		method := "GET"
		if r.Head {
			method = "HEAD"
		}
		uri := strings.Clone(target)
		if query != "" {
			uri = path + "?" + n.proxy.ForwardedQuery(query) // as ServeHTTP logs it (cache.sort_query)
		}
		host := strings.Clone(host)
		proto := "HTTP/1.1"
		if f.h2 {
			proto = "HTTP/2.0"
		}
		n.access.add(accessEntry{Time: start, Client: clientAddr(remote.String()), Site: s.name, Method: method, Host: host, URI: uri,
			Proto: proto, Status: ans.Status, Bytes: ans.BodyBytes, Duration: time.Since(start), CacheStatus: n.proxy.HitStatus(),
			Referer: string(r.Referer), UserAgent: string(r.UserAgent)})
	}
	return true
}
