package hitpath

import (
	"strings"
	"unsafe"

	"golang.org/x/net/http2/hpack"
)

// Fields decides, for a request another front has framed (HTTP/2's
// decoded header list), whether the hit path may answer it: the same
// field table and target rules the HTTP/1.1 loop applies to its own
// reads, so that both protocols ask the answerer the same questions.
type Fields struct {
	rules *fieldRules
}

// NewFields reads cfg's field lists (StripFields, UnkeyedFields).
func NewFields(cfg Config) *Fields {
	return &Fields{rules: &fieldRules{strip: lower(cfg.StripFields), unkeyed: lower(cfg.UnkeyedFields)}}
}

// loopRules are the HTTP/1.1 loop's field rules: cfg's lists, and whether
// it keeps every field for the answerer.
func loopRules(cfg Config) *fieldRules {
	r := NewFields(cfg).rules
	if cfg.KeepFields {
		r.keep = true
		for _, f := range lower(cfg.AnswererFields) {
			// A field the cache strips is gone before ServeHTTP reads it:
			// the answerer must not read it either, so it is judged as
			// on a client's request (declined if it could change the
			// answer).
			if !isStripped([]byte(f), r.strip) {
				r.own = append(r.own, f)
			}
		}
	}
	return r
}

// Request fills r from a GET or HEAD request without a body: its :path,
// its :authority (host) and its regular fields, lower-case as HTTP/2 sends
// them. It reports whether the hit path may answer the request; when it
// may not, the request goes to ServeHTTP, which answers it as it answers
// every request. r's slices point into the strings given and are valid as
// long as they are.
func (f *Fields) Request(r *Request, head bool, path, authority string, fields []hpack.HeaderField) bool {
	*r = Request{Head: head}
	target, host := bytesOf(path), bytesOf(authority)
	if !plainValue(target) || !plainTarget(target) || !plainHost(host) {
		return false
	}
	r.Target, r.Host = target, host
	for _, hf := range fields {
		name, value := bytesOf(hf.Name), bytesOf(hf.Value)
		if !isToken(name) || !plainValue(value) {
			return false
		}
		switch fieldOf(name) {
		case fieldHost, fieldConnection:
			// A Host beside :authority (RFC 9113 §8.3.1 lets them differ
			// only in ways net/http judges), or a field HTTP/2 forbids.
			return false
		}
		if stop, hand, _ := r.fieldValue(name, value, f.rules); stop != "" || hand != "" {
			return false
		}
	}
	r.AcceptEncoding = r.acceptStore[:r.nAccept]
	return true
}

// bytesOf is s's bytes without a copy; they must not be changed.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// lower returns fields lower-cased.
func lower(fields []string) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = strings.ToLower(f)
	}
	return out
}
