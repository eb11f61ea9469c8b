package cluster

import (
	"bytes"
	"encoding/hex"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/edgecache/edge/hitpath"
	"github.com/edgecache/edge/proxy"
)

// A peer's request for a page this node holds fresh in RAM is answered on
// the cluster listener's read loop (package hitpath), as a client's plain
// hit is on the public one: no net/http request, router, background
// reader, full caching handler or chunked trailer. The answer is the one
// ServeHTTP would give (proxy.Handler.AppendHit decides and writes it),
// signed as the signing writer signs, with its body MAC in the header
// (the ingress's verifier reads it there when no trailer came). Everything
// else (a miss, a climb on up, a request the loop would not answer for a
// client, an unsigned or badly signed one) goes to net/http and
// PeerHandler exactly as before. docs/benchmarks.md ("The peer hop") has
// the measurement that justified it.

// PeerHitFields are the peer request fields the read loop leaves to
// PeerHits' answerer (hitpath.Config.AnswererFields): a probe's
// Cache-Control: only-if-cached, which a fresh hit satisfies, and the
// X-Forwarded-Proto a trusted peer writes, which gives the key's scheme.
var PeerHitFields = []string{"Cache-Control", "X-Forwarded-Proto"}

// PeerIdleTimeout is how long the cluster listener keeps an idle peer
// connection: longer than the sending side keeps it in its pool, so that
// the sender, not the listener, closes it.
const PeerIdleTimeout = peerIdleTimeout + 30*time.Second

// PeerHitServer is the node's side of a peer hit: site resolution and the
// proxy's hit decision, as for a client's request on the public loop.
type PeerHitServer interface {
	// Site returns the site of a canonical host; ok false: none, the
	// request goes to net/http. A nil site with ok is a node without a
	// site table (tests and tools: proxy.Handler alone).
	Site(host string) (site *proxy.Site, ok bool)
	// AppendHit is proxy.Handler.AppendHit.
	AppendHit(dst []byte, req *proxy.HitRequest, date []byte, a *proxy.HitAnswer) bool
	// ReleaseHit is proxy.Handler.ReleaseHit.
	ReleaseHit(pinned *proxy.Entry, clientIP string)
}

// PeerHits returns the cluster listener's hit answerer.
func (c *Cluster) PeerHits(s PeerHitServer) hitpath.Answerer {
	a := &peerHits{c: c, s: s}
	a.release = a.releaseAnswer
	return a
}

type peerHits struct {
	c       *Cluster
	s       PeerHitServer
	release func(*hitpath.Answer)
}

func (p *peerHits) releaseAnswer(a *hitpath.Answer) {
	e, _ := a.Ref.(*proxy.Entry)
	p.s.ReleaseHit(e, a.RefKey)
}

// AppendHit implements hitpath.Answerer. It declines (and net/http with
// PeerHandler then answers, counting and refusing as it always has)
// whatever is not a validly signed probe or climb of a fresh RAM hit.
func (p *peerHits) AppendHit(dst []byte, r *hitpath.Request, date []byte, _ net.Addr, a *hitpath.Answer) bool {
	c := p.c
	now := time.Now()
	req, ok := peerRequestOf(r)
	if !ok {
		return false
	}
	reason, id := c.peerAuth.check(req, now)
	if reason != "" {
		return false // PeerHandler refuses it and counts why
	}
	rt, ok := routeOf(req.Header)
	if !ok {
		return false
	}
	// A probe's only-if-cached is answered by any fresh hit; any other
	// request directive is ServeHTTP's.
	if cc, ok := req.Header["Cache-Control"]; ok && (len(cc) != 1 || !strings.EqualFold(strings.TrimSpace(cc[0]), "only-if-cached")) {
		return false
	}
	host, ok := proxy.CanonicalHost(req.Host)
	if !ok {
		return false
	}
	site, ok := p.s.Site(host)
	if !ok {
		return false
	}
	// The site just resolved, not a second look-up; nil is none. Its name
	// as keys carry it (KeyPrefix), as the sender's Edge-Site gives it: the
	// one-site shortcut has a name but keys without one, and comparing
	// its Name declined every peer hit of a shortcut configuration (the
	// demo's, a single origin's) to net/http from 99dc966 until 2026-12-06.
	local := ""
	if site != nil {
		local = site.KeyName()
	}
	if !c.sameSite(req.Header, local) {
		return false // PeerHandler refuses another site's request and counts it
	}
	if !sameKeyVersion(req.Header, false) {
		return false // PeerHandler refuses it and counts it
	}
	path, query, _ := strings.Cut(req.URL.RequestURI(), "?")
	if strings.HasPrefix(path, "/_edge/") {
		return false // PeerHandler routes the protocol's own paths first
	}
	hr := proxy.HitRequest{Head: r.Head, Host: host, Path: path, RawQuery: query, Accept: r.AcceptEncodingStrings(),
		// No Remote: a peer's request is no client's, and is not held to
		// limits.max_inflight_per_client (as ServeHTTP exempts a relayed one).
		Close: r.Close, Site: site,
		// As proxy's key: a relayed request's scheme is the one its
		// trusted X-Forwarded-Proto names.
		TLS: strings.EqualFold(strings.TrimSpace(req.Header.Get("X-Forwarded-Proto")), "https")}
	// The nonce is taken before the hit is decided, so that no replayed
	// copy on another connection can be answered meanwhile; if this path
	// declines, it is given back for PeerHandler, which takes it again.
	// Between the two, a byte-identical copy on another connection can
	// take it first: that copy is answered and this request refused
	// (403), never both. Only an attacker on the path, who could drop
	// the request anyway, can make that happen.
	if reason := c.peerAuth.record(id, now); reason != "" {
		return false // a replay: PeerHandler refuses it and counts it
	}
	var ans proxy.HitAnswer
	if !p.s.AppendHit(dst, &hr, date, &ans) {
		c.peerAuth.forget(id)
		return false
	}
	head, ok := signHit(c.cfg.Secret, req.Header.Get(hdrNonce), ans.Head, ans.Body, r.Head)
	if !ok {
		// Not a head this path reads back (AppendHit never writes one):
		// ServeHTTP answers, having counted this hit once more.
		p.s.ReleaseHit(ans.Pinned, ans.ClientIP)
		c.peerAuth.forget(id)
		return false
	}
	a.Head, a.Body = head, ans.Body
	a.Release, a.RefKey = p.release, ans.ClientIP
	if ans.Pinned != nil {
		a.Ref = ans.Pinned
	}
	c.metrics.PeerRequests.WithLabelValues(rt.mode.String()).Inc()
	c.metrics.PeerLoopHits.Inc()
	return true
}

// peerRequestOf is the request net/http would make of r's bytes, as far
// as the MAC and the route read it: the method, Host, the target as
// net/url keeps it, and every other field under its canonical name.
func peerRequestOf(r *hitpath.Request) (*http.Request, bool) {
	u, err := url.ParseRequestURI(string(r.Target))
	if err != nil {
		return nil, false
	}
	h := make(http.Header, len(r.Fields))
	for _, f := range r.Fields {
		name := textproto.CanonicalMIMEHeaderKey(string(f.Name))
		if name == "Pragma" {
			// net/http adds Cache-Control: no-cache beside a lone Pragma:
			// no-cache; ServeHTTP's business either way.
			return nil, false
		}
		h[name] = append(h[name], string(f.Value))
	}
	method := http.MethodGet
	if r.Head {
		method = http.MethodHead
	}
	return &http.Request{Method: method, Host: string(r.Host), URL: u, Header: h}, true
}

// signHit returns a hit's head with the response MAC (over the status
// and every field, as the ingress's ReadResponse will read them) and the
// body MAC added, as the signing writer signs. head holds the status line,
// the fields, the blank line and possibly the body (when body is nil and
// the request was not HEAD). A stored copy of the protocol's own fields
// (an answer this node once took from a peer) is left out, as the signing
// writer's Set replaces it.
func signHit(secret []byte, nonce string, head, body []byte, isHead bool) ([]byte, bool) {
	end := bytes.Index(head, []byte("\r\n\r\n"))
	if end < 0 {
		return nil, false
	}
	for i, c := range head[:end+2] {
		if (c == '\n' && (i == 0 || head[i-1] != '\r')) || (c == '\r' && head[i+1] != '\n') {
			return nil, false // a bare LF or CR, which readers split differently
		}
	}
	line, fields, _ := bytes.Cut(head[:end+2], []byte("\r\n"))
	status, ok := statusOf(line)
	if !ok {
		return nil, false
	}
	out := make([]byte, 0, len(head)+200)
	out = append(out, line...)
	out = append(out, "\r\n"...)
	h := make(http.Header, 16)
	for len(fields) > 0 {
		var f []byte
		f, fields, _ = bytes.Cut(fields, []byte("\r\n"))
		name, value, ok := bytes.Cut(f, []byte(":"))
		if !ok || !httpguts.ValidHeaderFieldName(string(name)) || !httpguts.ValidHeaderFieldValue(string(value)) {
			return nil, false // not a line net/http reads as this field (obs-fold, odd bytes)
		}
		k := textproto.CanonicalMIMEHeaderKey(string(name))
		if k == hdrRespAuth || k == hdrBodyAuth || k == hdrKeyVer {
			continue
		}
		h[k] = append(h[k], string(bytes.Trim(value, " \t")))
		out = append(out, f...)
		out = append(out, "\r\n"...)
	}
	// As PeerHandler's answers: how this node keys pages (sameKeyVersion).
	h[hdrKeyVer] = []string{proxy.CacheKeyVersion}
	out = append(out, hdrKeyVer+": "+proxy.CacheKeyVersion+"\r\n"...)
	mac := newBodyMAC(secret, nonce)
	if !isHead {
		if body == nil {
			body = head[end+4:]
		}
		mac.Write(body)
	}
	out = append(out, hdrRespAuth+": "...)
	out = append(out, responseMAC(secret, nonce, status, h)...)
	out = append(out, "\r\n"+hdrBodyAuth+": "...)
	out = hex.AppendEncode(out, mac.Sum(nil))
	out = append(out, "\r\n"...)
	return append(out, head[end+2:]...), true
}

// statusOf reads "HTTP/1.1 200 OK".
func statusOf(line []byte) (int, bool) {
	rest, ok := bytes.CutPrefix(line, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 3 {
		return 0, false
	}
	n, err := strconv.Atoi(string(rest[:3]))
	return n, err == nil
}
