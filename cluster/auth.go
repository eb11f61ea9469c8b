package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/edgecache/edge/proxy"
)

// Peer requests and responses are authenticated with HMAC-SHA256 under the
// cluster secret. A request's MAC covers the method, Host, target and every
// header field (so a field added in transit is refused: any field may
// select a variant), a timestamp, a random nonce and the node it is for
// (Edge-To); a nonce is accepted once within the skew window and a request
// only by the node it names, so a captured request cannot be replayed, to
// that node or to another (before 2026-12-05 every other node took a
// captured request once: a purge of everything on its way to one node
// wiped them all).
// A response's MAC covers the request's nonce, the status and every header
// field, and a trailer carries the MAC of the body, so a peer response
// that was altered or cut is refused before it can be stored. For networks
// that must also keep peer traffic secret, cluster.tls adds mutual TLS.
const (
	hdrNode     = "Edge-Node"        // sender node id
	hdrTo       = "Edge-To"          // receiver node id
	hdrTime     = "Edge-Time"        // sender clock, Unix ns
	hdrNonce    = "Edge-Nonce"       // random, once per request
	hdrAuth     = "Edge-Auth"        // hex HMAC-SHA256 of the request
	hdrRespAuth = "Edge-Resp-Auth"   // hex HMAC-SHA256 of the response status and header
	hdrBodyAuth = "Edge-Body-Auth"   // trailer: hex HMAC-SHA256 of the response body
	hdrMode     = "Edge-Mode"        // "probe" or "climb"
	hdrPath     = "Edge-Path"        // remaining climb path, comma-separated id:rank
	hdrSite     = "Edge-Site"        // the site the sender keys the page under (siteField)
	hdrKeyVer   = "Edge-Key-Version" // the cache-key version the sender keys pages under (proxy.CacheKeyVersion)
	hdrRank     = "Edge-Rank"        // tree rank the receiver plays
	hdrHop      = "Edge-Hop"         // hops so far (loop guard)
	hdrWait     = "Edge-Wait"        // the sending fill's place in the wait order (proxy.WaitOrder)
)

// maxSkew bounds the clock difference accepted on a signed peer request.
const maxSkew = 5 * time.Second

// unsignedFields are the fields the MAC leaves out: framing fields that
// Go's client or server may add or drop on the way, the fields of
// unsignedMeaningful (deleted once the MAC is checked), and the MACs
// themselves.
var unsignedFields = slices.Concat([]string{"Content-Length", "Transfer-Encoding", "Trailer"},
	unsignedMeaningful, []string{hdrAuth, hdrRespAuth, hdrBodyAuth})

// appendCanonical appends every signed header field, sorted, to b: the
// field's name, ':', each value followed by '\n', then a 0 byte. A field
// whose values are all empty counts as absent. The bytes are built in one
// buffer and written to the MAC once: a Write per string made every name
// and value a heap copy (about 80 allocations per peer hop,
// BenchmarkPeerHop); TestMACsAreStable holds the bytes to what they were.
func appendCanonical(b []byte, h http.Header) []byte {
	var small [32]string
	names := small[:0]
	for k, vs := range h {
		if slices.Contains(unsignedFields, k) || allEmpty(vs) {
			continue
		}
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		b = append(b, k...)
		b = append(b, ':')
		for _, v := range h[k] {
			b = append(b, v...)
			b = append(b, '\n')
		}
		b = append(b, 0)
	}
	return b
}

func allEmpty(vs []string) bool {
	for _, v := range vs {
		if v != "" {
			return false
		}
	}
	return true
}

// appendParts appends each string followed by a 0 byte.
func appendParts(b []byte, parts ...string) []byte {
	for _, s := range parts {
		b = append(b, s...)
		b = append(b, 0)
	}
	return b
}

func requestMAC(secret []byte, r *http.Request) string {
	m := hmac.New(sha256.New, secret)
	b := appendParts(make([]byte, 0, 1024), "req", r.Method, r.Host, r.URL.RequestURI())
	m.Write(appendCanonical(b, r.Header))
	return hex.EncodeToString(m.Sum(nil))
}

func responseMAC(secret []byte, nonce string, status int, h http.Header) string {
	m := hmac.New(sha256.New, secret)
	b := appendParts(make([]byte, 0, 1024), "resp", nonce, strconv.Itoa(status))
	m.Write(appendCanonical(b, h))
	return hex.EncodeToString(m.Sum(nil))
}

func newBodyMAC(secret []byte, nonce string) hash.Hash {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("body\x00" + nonce + "\x00"))
	return m
}

// sign stamps an outgoing peer request from node to the node named to.
func sign(secret []byte, node, to string, r *http.Request) {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	r.Header.Set(hdrNode, node)
	r.Header.Set(hdrTo, to)
	r.Header.Set(hdrTime, strconv.FormatInt(time.Now().UnixNano(), 10))
	r.Header.Set(hdrNonce, hex.EncodeToString(nonce[:]))
	if _, ok := r.Header["User-Agent"]; !ok {
		r.Header["User-Agent"] = []string{""} // present but empty: Go's client then sends none
	}
	r.Header.Set(hdrAuth, requestMAC(secret, r))
}

// verifier checks incoming peer requests and remembers their nonces.
type verifier struct {
	secret []byte
	self   string     // this node's id: requests for another node are refused
	mu     sync.Mutex // makes check-and-record of a nonce one step
	// seen maps a node's nonce to when it may be forgotten. A plain LRU
	// with the expiry in the value, not an expiring one: that library's
	// cleaner is a goroutine that never ends.
	seen *lru.Cache[string, time.Time]
}

// nonceMemory is how long a nonce is remembered: past both sides of the
// skew window, a request carrying it is refused as skewed anyway.
const nonceMemory = 2*maxSkew + time.Second

func newVerifier(secret []byte, self string) *verifier {
	// The size bounds memory at a rate far above what a cluster sends.
	seen, _ := lru.New[string, time.Time](1 << 18) // a positive size never fails
	return &verifier{secret: secret, self: self, seen: seen}
}

// verify checks an incoming peer request; reason is "" when it is valid.
func (v *verifier) verify(r *http.Request, now time.Time) (reason string) {
	reason, id := v.check(r, now)
	if reason != "" {
		return reason
	}
	return v.record(id, now)
}

// check is verify without the nonce: whether r is signed, in time and
// untouched. id is the nonce's name for record.
func (v *verifier) check(r *http.Request, now time.Time) (reason, id string) {
	if r.Header.Get(hdrAuth) == "" || r.Header.Get(hdrNode) == "" {
		return "unsigned", ""
	}
	ts, err := strconv.ParseInt(r.Header.Get(hdrTime), 10, 64)
	nonce := r.Header.Get(hdrNonce)
	if err != nil || len(nonce) != 32 {
		return "malformed", ""
	}
	if d := now.Sub(time.Unix(0, ts)); d > maxSkew || d < -maxSkew {
		return "skew", ""
	}
	if !hmac.Equal([]byte(requestMAC(v.secret, r)), []byte(strings.ToLower(r.Header.Get(hdrAuth)))) {
		return "mac", ""
	}
	if r.Header.Get(hdrTo) != v.self {
		return "misdirected", "" // signed for another node: captured on its way there
	}
	return "", r.Header.Get(hdrNode) + "/" + nonce
}

// record takes a checked request's nonce: "replay" if it was taken.
func (v *verifier) record(id string, now time.Time) (reason string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if until, ok := v.seen.Get(id); ok && now.Before(until) {
		return "replay"
	}
	v.seen.Add(id, now.Add(nonceMemory))
	return ""
}

// forget gives back a nonce that record took for a request nobody
// answered (the peer read loop declined it): net/http then checks and
// takes it again. Two copies can never both be answered, as whoever
// answers holds the nonce from record on.
func (v *verifier) forget(id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seen.Remove(id)
}

// signingWriter signs a peer response: the status and header when they are
// written, the body in a trailer at the end.
type signingWriter struct {
	http.ResponseWriter
	secret []byte
	nonce  string
	head   bool // the request was HEAD: no body will follow
	body   hash.Hash
	wrote  bool
	empty  bool // a response without a body: its MAC went in the header
}

func newSigningWriter(w http.ResponseWriter, r *http.Request, secret []byte) *signingWriter {
	nonce := r.Header.Get(hdrNonce)
	return &signingWriter{ResponseWriter: w, secret: secret, nonce: nonce, head: r.Method == http.MethodHead, body: newBodyMAC(secret, nonce)}
}

// bodyless reports whether a response with this status carries no body.
func bodyless(code int) bool {
	return code < 200 || code == http.StatusNoContent || code == http.StatusNotModified
}

func (s *signingWriter) WriteHeader(code int) {
	if s.wrote {
		return
	}
	s.wrote = true
	h := s.Header()
	if code == http.StatusNotModified {
		// net/http drops these from a 304 after we would have signed them.
		delete(h, "Content-Type")
		delete(h, "Content-Length")
	}
	if s.empty = bodyless(code) || s.head; s.empty {
		// No body, so no trailer either: the (empty) body's MAC goes in
		// the header.
		h.Set(hdrBodyAuth, hex.EncodeToString(s.body.Sum(nil)))
	} else {
		// The body MAC travels in a trailer, which needs chunked encoding.
		delete(h, "Content-Length")
		h.Set("Trailer", hdrBodyAuth)
	}
	if _, ok := h["Date"]; !ok {
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil // no sniffing: it would add an unsigned field
	}
	// Every answer says how this node keys pages, whatever wrote its
	// header (a pass copies the origin's): an asker stores no page from a
	// node that keys them another way (sameKeyVersion).
	h.Set(hdrKeyVer, proxy.CacheKeyVersion)
	h.Set(hdrRespAuth, responseMAC(s.secret, s.nonce, code, h))
	s.ResponseWriter.WriteHeader(code)
}

func (s *signingWriter) Write(b []byte) (int, error) {
	if !s.wrote {
		s.WriteHeader(http.StatusOK)
	}
	s.body.Write(b)
	return s.ResponseWriter.Write(b)
}

// finish sets the body MAC trailer once the handler is done.
func (s *signingWriter) finish() {
	if !s.wrote {
		s.WriteHeader(http.StatusOK)
	}
	if !s.empty {
		s.Header().Set(hdrBodyAuth, hex.EncodeToString(s.body.Sum(nil)))
	}
}

func (s *signingWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// errBadPeerResponse is returned for a peer response that fails
// authentication.
var errBadPeerResponse = errors.New("cluster: peer response failed authentication")

// verifyResponse checks a peer response's status and header against the
// request's nonce, and wraps its body so that reading it to the end fails
// unless the body MAC in the trailer matches.
func verifyResponse(secret []byte, nonce string, resp *http.Response) error {
	got := resp.Header.Get(hdrRespAuth)
	if got == "" || !hmac.Equal([]byte(responseMAC(secret, nonce, resp.StatusCode, resp.Header)), []byte(got)) {
		return errBadPeerResponse
	}
	dropUnsigned(resp.Header)
	resp.Body = &verifiedBody{ReadCloser: resp.Body, resp: resp, mac: newBodyMAC(secret, nonce)}
	return nil
}

// unsignedMeaningful are the unsigned fields that still mean something
// once the message is parsed: the proxy deletes every field a Connection
// value names (RFC 9110 §7.6.1), so a relay that added "Connection: Vary"
// to a signed Vary: Cookie answer had one user's page stored for everyone
// ("Connection: Cache-Control" dropped private and no-store; "Connection:
// Cookie" on a request dropped the cookie at the peer), and an added Host
// was stored and served (a review's). Nobody signed them, so nobody reads
// them: they go once the MAC has been checked. Go's client and server have
// already acted on what framing needed of them. Host among them: Go's
// client never sends Header["Host"] (it sends r.Host, which the MAC covers
// apart), so a request signed over one was refused as forged.
var unsignedMeaningful = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Upgrade", "Te", "Host"}

// dropUnsigned deletes unsignedMeaningful from a verified message's header,
// and every field whose values are all empty: the MAC counts those as
// absent (appendCanonical; the sender's empty User-Agent, which Go's
// client does not send), so one added on the way was acted on unsigned:
// an empty Authorization made a peer's request one with credentials, an
// empty unknown field made it a variant of its own (a review's
// TestS53EmptyFieldAddedAfterSigningIsRefused). Absent, as signed.
func dropUnsigned(h http.Header) {
	for _, k := range unsignedMeaningful {
		delete(h, k)
	}
	for k, vs := range h {
		if allEmpty(vs) {
			delete(h, k)
		}
	}
}

// verifiedBody checks the body MAC trailer at the end of the body.
type verifiedBody struct {
	io.ReadCloser
	resp *http.Response
	mac  hash.Hash
}

func (b *verifiedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mac.Write(p[:n])
	if errors.Is(err, io.EOF) {
		want := hex.EncodeToString(b.mac.Sum(nil))
		got := b.resp.Trailer.Get(hdrBodyAuth)
		if got == "" {
			// A response without a body carries the MAC in its header;
			// without the secret nobody can make it match other bytes.
			got = b.resp.Header.Get(hdrBodyAuth)
		}
		if !hmac.Equal([]byte(got), []byte(want)) {
			return n, errBadPeerResponse
		}
	}
	return n, err
}

// ServerTLS is the peer listener's side of mutual TLS: it presents cert
// and requires a client certificate signed by the cluster CA.
func ServerTLS(cert tls.Certificate, ca *x509.CertPool) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

// ClientTLS is the sending side: it presents cert and accepts a peer whose
// certificate chains to the cluster CA. Peers are addressed by IP and
// port, which certificates rarely name, so the chain (not the name) is
// what identifies a member of the cluster.
func ClientTLS(cert tls.Certificate, ca *x509.CertPool) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by VerifyConnection below: chain to the CA, any name
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("cluster: peer presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			if err != nil {
				return fmt.Errorf("cluster: peer certificate: %w", err)
			}
			return nil
		},
	}
}

// LoadTLS reads cluster.tls files and returns the server and client sides.
func LoadTLS(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster.tls: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster.tls.ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("cluster.tls.ca_file %s: no PEM certificate", caFile)
	}
	return ServerTLS(cert, pool), ClientTLS(cert, pool), nil
}

// siteField is a site's name as a data request carries it in Edge-Site:
// "/" for the one-site shortcut (Config.SiteOf's ""), which no site name
// can hold.
func siteField(name string) string {
	if name == "" {
		return "/"
	}
	return name
}

// sameKeyVersion reports whether a signed data request, or the answer to
// one, was keyed under this release's cache-key version. A node of
// another version maps requests to keys differently: during a rolling
// upgrade that closes a key hole (the Vary list reading of 2026-12-06),
// an old peer could answer for the new key a variant it stored under the
// old mapping, poisoned through the hole, and the asker store it under a
// key the disk tier's version check no longer removes. A request without
// the field (an older asker) is answered as before: it keys under its own
// mapping anyway. An answer must carry it: an older peer's is refused.
func sameKeyVersion(h http.Header, required bool) bool {
	v, ok := h[hdrKeyVer]
	if !ok {
		return !required
	}
	return len(v) == 1 && v[0] == proxy.CacheKeyVersion
}

// sameSite reports whether a signed data request was made under the site
// this node gives its host. During a rolling reload that moves a host to
// another site, a node still on the old table would otherwise answer from
// (and fetch for) the old site, and the asker store what it got under the
// new site's key: one site's pages served for another (a review). A
// request without the field, from a node of an older version, is taken as
// before; the field is signed, so it cannot be dropped on the way.
// local is the name of the site this node gives the request's host.
func (c *Cluster) sameSite(h http.Header, local string) bool {
	v, ok := h[hdrSite]
	if !ok || c.cfg.SiteOf == nil {
		return true
	}
	return len(v) == 1 && v[0] == siteField(local)
}
