package hitpath

import (
	"bytes"

	"github.com/edgecache/edge/internal/reqfield"
)

// Request is a plain GET or HEAD read from a connection. Its byte slices
// point into the connection's read buffer and are valid only until the
// answerer returns.
type Request struct {
	Head           bool
	Target         []byte   // the origin-form request target, as sent
	Host           []byte   // the one Host field's value
	AcceptEncoding [][]byte // Accept-Encoding values, in order
	Referer        []byte
	UserAgent      []byte
	Close          bool // Connection: close
	// Fields are every field line but Host's, in order, when the loop's
	// Config.KeepFields is set (nil otherwise): for an answerer that must
	// see the request whole (a signed peer request's MAC covers them all).
	Fields []Field
	// Dropped and Forwarding count the field names of those classes
	// (package reqfield) the request carries: the cache deletes them
	// (a forwarding one unless its sender is trusted) before it looks the
	// request up, and counts them as ServeHTTP's sanitize does
	// (edge_request_fields_total). A name on several lines counts once,
	// as sanitize counts it.
	Dropped, Forwarding int
	// ServerName is the SNI of the request's TLS connection ("": none,
	// or not TLS): a request for another host is left to ServeHTTP,
	// which answers 421 where the connection's certificate does not
	// name it (RFC 9110 §7.4).
	ServerName  string
	counted     [8][]byte // the names counted so far (views of the request's bytes)
	nCounted    int
	nAccept     int
	acceptStore [4][]byte
	fieldBuf    []Field // Fields' storage, kept across requests
}

// AcceptEncodingStrings returns the Accept-Encoding values as strings
// that outlive the request's buffer (nil when it has none), as the cache's
// HitRequest takes them.
func (r *Request) AcceptEncodingStrings() []string {
	if len(r.AcceptEncoding) == 0 {
		return nil
	}
	out := make([]string, len(r.AcceptEncoding))
	for i, v := range r.AcceptEncoding {
		out[i] = string(v)
	}
	return out
}

// Field is one field line of a request, its name as sent and its value
// trimmed of surrounding whitespace.
type Field struct{ Name, Value []byte }

// maxKeptFields bounds Request.Fields: a request with more field lines
// is handed to net/http.
const maxKeptFields = 64

// parseResult says what parse made of the bytes it was given.
type parseResult int

const (
	// answerable: a plain GET or HEAD the loop may answer from the cache.
	answerable parseResult = iota
	// handable: a complete GET or HEAD without a body that the loop
	// reads exactly as net/http does, but whose answer needs ServeHTTP
	// (conditionals, a Range, Authorization, an unusual target or host).
	// net/http gets exactly its head and the loop gets the connection
	// back after the response.
	handable
	// incomplete: no end of the head yet, and nothing that rules the loop
	// out.
	incomplete
	// foreign: anything the loop does not frame exactly as net/http would
	// (another method or version, a body, Expect, Upgrade, bytes net/http
	// has its own rules for). net/http keeps the connection for good.
	foreign
)

// The reasons a request goes to net/http, as metric label values (a
// bounded set).
const (
	reasonMethod   = "method"    // not GET or HEAD
	reasonVersion  = "version"   // not HTTP/1.1
	reasonTarget   = "target"    // not a plain origin-form target
	reasonHost     = "host"      // missing, repeated or unusual Host
	reasonField    = "field"     // a field that can change the answer
	reasonFraming  = "framing"   // a body, Expect, Upgrade or a Connection option
	reasonSyntax   = "syntax"    // anything net/http should judge (bare LF, obs-fold, odd bytes)
	reasonTooLarge = "too_large" // the head does not fit the buffer
	reasonNotHit   = "not_hit"   // the cache does not answer it with a fresh hit here
)

// parse reads one request head from b into r. It returns the head's length
// and answerable or handable (with the reason it is not answerable), or
// incomplete when b holds no complete head yet, or foreign with a reason.
// It is deliberately narrow: every head it frames, net/http frames the
// same way and reads as the same request (FuzzParseAgreesWithNetHTTP
// checks this); everything unusual is left to net/http, which answers or
// rejects it as it always has.
//
// rules name the fields the operator configured (nil: none): of those the
// loop reads, a stripped one is ignored as the cache would ignore it, and
// an unknown field the operator declared unkeyed does not stop a hit.
func parse(b []byte, r *Request, rules *fieldRules) (n int, res parseResult, reason string) {
	keep := r.fieldBuf[:0]
	*r = Request{fieldBuf: keep}
	line, rest, ls := cutLine(b)
	switch ls {
	case lineIncomplete:
		return 0, incomplete, ""
	case lineBad:
		return 0, foreign, reasonSyntax // a bare LF
	}
	if res, reason = r.requestLine(line); res == foreign {
		return 0, foreign, reason
	}
	hosts := 0
	for {
		line, rest, ls = cutLine(rest)
		switch ls {
		case lineIncomplete:
			return 0, incomplete, ""
		case lineBad:
			return 0, foreign, reasonSyntax
		}
		if len(line) == 0 {
			break
		}
		stop, hand, host := r.field(line, rules)
		if stop != "" {
			return 0, foreign, stop
		}
		if host {
			hosts++
		}
		if reason == "" {
			reason = hand // the first reason to hand the request over counts
		}
	}
	if hosts != 1 {
		return 0, foreign, reasonHost // net/http refuses it and closes
	}
	r.AcceptEncoding = r.acceptStore[:r.nAccept]
	if rules != nil && rules.keep {
		r.Fields = r.fieldBuf
	}
	if reason != "" {
		return len(b) - len(rest), handable, reason
	}
	return len(b) - len(rest), answerable, ""
}

// requestLine reads a request line: foreign for what the loop does not
// frame itself, else the reason to hand the request over ("" if none).
func (r *Request) requestLine(line []byte) (parseResult, string) {
	switch {
	case bytes.HasPrefix(line, []byte("GET ")):
		line = line[4:]
	case bytes.HasPrefix(line, []byte("HEAD ")):
		r.Head = true
		line = line[5:]
	default:
		return foreign, reasonMethod
	}
	target, version, ok := bytes.Cut(line, []byte(" "))
	if !ok || !bytes.Equal(version, []byte("HTTP/1.1")) || !plainValue(target) || len(target) == 0 || target[0] != '/' {
		// Also a target with spaces or control bytes, or not in origin
		// form: net/http's own URL rules decide those.
		return foreign, reasonVersion
	}
	r.Target = target
	if !plainTarget(target) {
		return handable, reasonTarget
	}
	return answerable, ""
}

// field reads one header field line into r. stop is the reason the
// connection is net/http's from here on, hand a reason to hand this
// request over ("" for none of either); host reports a Host field.
func (r *Request) field(line []byte, rules *fieldRules) (stop, hand string, host bool) {
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok || !isToken(name) || !plainValue(value) {
		return reasonSyntax, "", false // includes obs-fold: a line starting with SP or HTAB
	}
	return r.fieldValue(name, trimOWS(value), rules)
}

// fieldValue reads one field, its name a token and its value trimmed.
func (r *Request) fieldValue(name, value []byte, rules *fieldRules) (stop, hand string, host bool) {
	if rules == nil || !rules.keep {
		return r.fieldClass(name, value, rules)
	}
	if fieldOf(name) != fieldHost {
		if len(r.fieldBuf) == maxKeptFields {
			// Too many to keep: handed over, but every line is still
			// classified, so that framing makes it net/http's for good.
			stop, _, host = r.fieldClass(name, value, rules)
			return stop, reasonField, host
		}
		r.fieldBuf = append(r.fieldBuf, Field{Name: name, Value: value})
	}
	if isStripped(name, rules.own) {
		return "", "", false // the answerer's to judge
	}
	return r.fieldClass(name, value, rules)
}

// fieldClass judges one field as the loop does for a client's request:
// whether it makes the connection net/http's (stop), hands this request
// over (hand), or is read into r.
func (r *Request) fieldClass(name, value []byte, rules *fieldRules) (stop, hand string, host bool) {
	var strip, unkeyed []string
	if rules != nil {
		strip, unkeyed = rules.strip, rules.unkeyed
	}
	f := fieldOf(name)
	if (f >= fieldAcceptEncoding && f <= fieldUserAgent || f >= fieldDropped) && len(strip) > 0 && isStripped(name, strip) {
		f = fieldOther // forwarding.strip_headers: gone before anything reads or counts it
	}
	switch f {
	case fieldDropped:
		if r.firstOf(name) {
			r.Dropped++
		}
	case fieldForwarding:
		if r.firstOf(name) {
			r.Forwarding++
		}
	case fieldHost:
		r.Host = value
		if !plainHost(value) {
			return "", reasonHost, true
		}
		return "", "", true
	case fieldConnection:
		switch {
		case asciiEqualFold(value, "close"):
			r.Close = true
		case asciiEqualFold(value, "keep-alive"):
		default:
			return reasonFraming, "", false
		}
	case fieldAcceptEncoding:
		if r.nAccept == len(r.acceptStore) {
			return "", reasonField, false
		}
		r.acceptStore[r.nAccept] = value
		r.nAccept++
	case fieldReferer:
		if r.Referer == nil {
			r.Referer = value // the first, as Header.Get gives the access log
		}
	case fieldUserAgent:
		if r.UserAgent == nil {
			r.UserAgent = value
		}
	case fieldFraming:
		return reasonFraming, "", false
	case fieldDecline:
		return "", reasonField, false
	case fieldKeyed:
		// A field the cache keys (package reqfield): the request has a
		// variant of its own, which ServeHTTP looks up.
		if !isStripped(name, unkeyed) && !isStripped(name, strip) {
			return "", reasonField, false
		}
	}
	return "", "", false
}

// firstOf reports whether name is the first line of its name among the
// counted ones (past eight distinct names every line counts).
func (r *Request) firstOf(name []byte) bool {
	for _, seen := range r.counted[:r.nCounted] {
		if bytes.EqualFold(seen, name) {
			return false
		}
	}
	if r.nCounted < len(r.counted) {
		r.counted[r.nCounted] = name
		r.nCounted++
	}
	return true
}

// fieldRules are the operator's field lists, lower-case.
type fieldRules struct {
	strip   []string // forwarding.strip_headers
	unkeyed []string // forwarding.unkeyed_headers
	keep    bool     // Config.KeepFields
	own     []string // Config.AnswererFields
}

func isStripped(name []byte, strip []string) bool {
	for _, s := range strip {
		if asciiEqualFold(name, s) { // s is lower-case (NewListener)
			return true
		}
	}
	return false
}

// lineStatus is what cutLine found.
type lineStatus int

const (
	lineOK         lineStatus = iota
	lineIncomplete            // no LF yet
	lineBad                   // an LF without its CR
)

// cutLine splits b at its first CRLF. A CR elsewhere in the line is left
// for the callers' byte checks (field values and the request target refuse
// control bytes; the method and version are compared whole).
func cutLine(b []byte) (line, rest []byte, st lineStatus) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, b, lineIncomplete
	}
	if i == 0 || b[i-1] != '\r' {
		return nil, b, lineBad
	}
	return b[:i-1], b[i+1:], lineOK
}

// plainTarget accepts an origin-form target whose bytes net/url keeps
// exactly as sent in EscapedPath and RawQuery: unreserved and sub-delims
// characters, ':', '@', '/', '?' and well-formed percent escapes. '#', raw
// spaces, quotes, brackets, non-ASCII bytes and a "//" start (which some
// parsers read as an authority) go to net/http.
func plainTarget(t []byte) bool {
	if len(t) == 0 || t[0] != '/' || (len(t) > 1 && t[1] == '/') {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case targetChar[c]:
		case c == '%':
			if i+2 >= len(t) || !isHex(t[i+1]) || !isHex(t[i+2]) {
				return false
			}
			i += 2
		default:
			return false
		}
	}
	return true
}

// plainHost accepts a reg-name or IPv4 host with an optional port, or a
// bracketed IPv6 literal with one: what every site table and cache key
// reads the same way.
func plainHost(h []byte) bool { return allIn(h, &hostChar) }

// isToken reports whether b is a non-empty RFC 9110 token (a field name).
func isToken(b []byte) bool { return allIn(b, &tokenChar) }

// allIn reports whether b is non-empty and every byte is in class.
func allIn(b []byte, class *[256]bool) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !class[c] {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Byte classes, as tables: the parser looks at every byte of a head.
var tokenChar, targetChar, hostChar [256]bool

func init() {
	alnum := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	for _, c := range []byte(alnum + "!#$%&'*+-.^_`|~") {
		tokenChar[c] = true
	}
	for _, c := range []byte(alnum + "-._~!$&'()*+,;=:@/?") {
		targetChar[c] = true
	}
	for _, c := range []byte(alnum + "-.:[]") {
		hostChar[c] = true
	}
}

// plainValue accepts visible ASCII, SP and HTAB. Control bytes and
// obs-text go to net/http, which has its own rules for them.
func plainValue(v []byte) bool {
	for _, c := range v {
		if (c < 0x20 && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

func trimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// field is what the hit path does with a request field.
type field int

const (
	fieldOther          field = iota // no bearing on a fresh hit's answer
	fieldHost                        // selects the site and the key
	fieldConnection                  // keep-alive or close only
	fieldAcceptEncoding              // selects the coding of compressible entries
	fieldReferer                     // access log
	fieldUserAgent                   // access log
	fieldDecline                     // changes the answer: ServeHTTP's
	fieldFraming                     // a body, an interim response or another protocol: net/http's for good
	fieldKeyed                       // unknown to the cache, so part of the key (reqfield.Keyed)
	fieldDropped                     // never forwarded (reqfield.Dropped): counted, no bearing on a hit
	fieldForwarding                  // a forwarding field (reqfield.Forwarding): counted, no bearing on a hit
)

// declinedFields can change what a hit's answer is: conditionals, ranges,
// authorization, request directives, and the scheme a trusted proxy
// reports. Such a request is handed to ServeHTTP.
var declinedFields = []string{
	"range", "if-range", "if-match", "if-none-match", "if-modified-since", "if-unmodified-since",
	"authorization", "proxy-authorization", "cache-control", "pragma", "x-forwarded-proto",
}

// framingFields change how the request is framed or what the connection
// becomes (a body, Expect's interim response, Upgrade, trailers). The
// connection stays with net/http.
var framingFields = []string{
	"content-length", "transfer-encoding", "expect", "upgrade", "te", "trailer", "http2-settings",
	"keep-alive", "proxy-connection",
}

// fieldOf classifies a field name. The name is lower-cased into a small
// array so that one switch on it finds the class (no allocation: the
// compiler compares string(bytes) in place).
func fieldOf(name []byte) field {
	var buf [64]byte
	if len(name) > len(buf) {
		return fieldOfClass(reqfield.Classify(string(name))) // longer than any name below
	}
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	switch string(buf[:len(name)]) {
	case "host":
		return fieldHost
	case "connection":
		return fieldConnection
	case "accept-encoding":
		return fieldAcceptEncoding
	case "referer":
		return fieldReferer
	case "user-agent":
		return fieldUserAgent
	case "range", "if-range", "if-match", "if-none-match", "if-modified-since", "if-unmodified-since",
		"authorization", "proxy-authorization", "cache-control", "pragma", "x-forwarded-proto":
		return fieldDecline
	case "content-length", "transfer-encoding", "expect", "upgrade", "te", "trailer", "http2-settings",
		"keep-alive", "proxy-connection":
		return fieldFraming
	}
	return fieldOfClass(reqfield.ClassifyLower(buf[:len(name)]))
}

// fieldOfClass is what the hit path does with a field of class c. Dropped
// and forwarding fields have no bearing on a hit (the cache deletes or
// replaces them before it looks the request up) and are only counted; a
// field the cache keys selects another variant.
func fieldOfClass(c reqfield.Class) field {
	switch c {
	case reqfield.Keyed:
		return fieldKeyed
	case reqfield.Dropped:
		return fieldDropped
	case reqfield.Forwarding:
		return fieldForwarding
	}
	return fieldOther
}
