package node

import (
	"bytes"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/hitpath"
	"github.com/edgecache/edge/proxy"
)

// hitFront answers the plain listener's HTTP/1.1 hit path (tuning.hit_path)
// the way the net/http front would: the site table, the TLS front's
// plain-listener rules and the access log first, then the proxy. Whatever
// it declines goes to net/http with the connection.
type hitFront struct {
	n    *Node
	acme bool               // ACME HTTP-01 answers live on the plain listener
	h1   prometheus.Counter // the TLS front's count of plain HTTP/1.1 requests (nil without TLS)
}

// acmePrefix is where HTTP-01 challenges are asked.
var acmePrefix = []byte("/.well-known/acme-challenge/")

// AppendHit implements hitpath.Answerer.
func (f *hitFront) AppendHit(dst []byte, r *hitpath.Request, date []byte, remote net.Addr, a *hitpath.Answer) bool {
	n := f.n
	if f.acme && bytes.HasPrefix(r.Target, acmePrefix) {
		return false
	}
	start := time.Now()
	host := string(r.Host)
	s := n.sites.Load().lookup(host)
	if s == nil {
		return false // net/http answers 421
	}
	target := string(r.Target)
	path, query, _ := strings.Cut(target, "?")
	hr := proxy.HitRequest{Head: r.Head, Host: host, Path: path, RawQuery: query, Remote: remote, Close: r.Close}
	if len(r.AcceptEncoding) > 0 {
		hr.Accept = make([]string, len(r.AcceptEncoding))
		for i, v := range r.AcceptEncoding {
			hr.Accept[i] = string(v)
		}
	}
	var ans proxy.HitAnswer
	if !n.proxy.AppendHit(dst, &hr, date, &ans) {
		return false
	}
	a.Head, a.Body = ans.Head, ans.Body
	if ans.Body != nil {
		held := ans // only a large hit pays for the closure
		a.Release = func() { n.proxy.Release(&held) }
	}
	s.requests.Inc()
	if f.h1 != nil {
		f.h1.Inc()
	}
	if n.access != nil {
		method := "GET"
		if r.Head {
			method = "HEAD"
		}
		n.access.add(accessEntry{Time: start, Client: clientAddr(remote.String()), Site: s.name, Method: method, Host: host, URI: target,
			Proto: "HTTP/1.1", Status: ans.Status, Bytes: ans.BodyBytes, Duration: time.Since(start), CacheStatus: n.proxy.HitStatus(),
			Referer: string(r.Referer), UserAgent: string(r.UserAgent)})
	}
	return true
}
