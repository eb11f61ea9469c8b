package hitpath

import (
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"
)

func TestFieldsRequest(t *testing.T) {
	f := NewFields(Config{StripFields: []string{"X-Strip"}, UnkeyedFields: []string{"X-Unkeyed"}})
	cases := []struct {
		path, authority string
		fields          []string
		want            bool
	}{
		{"/a?b=c", "a.test", nil, true},
		{"/a", "a.test:8443", []string{"accept-encoding", "gzip", "user-agent", "u", "referer", "r", "cookie", "c=1"}, true},
		{"/a", "a.test", []string{"x-unkeyed", "1", "x-strip", "2"}, true},
		{"/a", "a.test", []string{"authorization", "Bearer x"}, false},
		{"/a", "a.test", []string{"range", "bytes=0-1"}, false},
		{"/a", "a.test", []string{"if-none-match", `"x"`}, false},
		{"/a", "a.test", []string{"cache-control", "no-cache"}, false},
		{"/a", "a.test", []string{"pragma", "no-cache"}, false},
		{"/a", "a.test", []string{"x-forwarded-proto", "http"}, false},
		{"/a", "a.test", []string{"x-unknown", "1"}, false}, // keyed: a variant of its own
		{"/a", "a.test", []string{"host", "b.test"}, false},
		{"/a", "a.test", []string{"te", "trailers"}, false},
		{"/a", "a.test", []string{"content-length", "0"}, false},
		{"/a", "a.test", []string{"x", "a\x01b"}, false},
		{"/a", "", nil, false},
		{"/a", "a test", nil, false},
		{"//a", "a.test", nil, false},
		{"*", "a.test", nil, false},
		{"/a b", "a.test", nil, false},
		{"/a#b", "a.test", nil, false},
		{"/%zz", "a.test", nil, false},
		{"/é", "a.test", nil, false},
		{"/a", "a.test", []string{"accept-encoding", "a", "accept-encoding", "b", "accept-encoding", "c", "accept-encoding", "d", "accept-encoding", "e"}, false},
	}
	for _, c := range cases {
		var hf []hpack.HeaderField
		for i := 0; i+1 < len(c.fields); i += 2 {
			hf = append(hf, hpack.HeaderField{Name: c.fields[i], Value: c.fields[i+1]})
		}
		var r Request
		if got := f.Request(&r, false, c.path, c.authority, hf); got != c.want {
			t.Errorf("%q %q %v: %v, want %v", c.path, c.authority, c.fields, got, c.want)
		} else if got && (string(r.Target) != c.path || string(r.Host) != c.authority) {
			t.Errorf("%q %q: target %q host %q", c.path, c.authority, r.Target, r.Host)
		}
	}
}

// FuzzHTTP2Fields checks that the HTTP/2 front is never more willing than
// the HTTP/1.1 loop (itself fuzzed against net/http): a request the
// fields allow to be a hit, written as an HTTP/1.1 head, is answerable
// there too, with the same target, host and Accept-Encoding.
func FuzzHTTP2Fields(f *testing.F) {
	f.Add("/a?b", "a.test", "accept-encoding\x00gzip\x00cookie\x00c=1")
	f.Add("/", "h:1", "x-unkeyed\x00v\x00user-agent\x00 u ")
	f.Add("/x", "[::1]:8", "referer\x00r")
	cfg := Config{UnkeyedFields: []string{"x-unkeyed"}}
	fields := NewFields(cfg)
	f.Fuzz(func(t *testing.T, path, authority, list string) {
		parts := strings.Split(list, "\x00")
		var hf []hpack.HeaderField
		var head strings.Builder
		head.WriteString("GET " + path + " HTTP/1.1\r\nHost: " + authority + "\r\n")
		for i := 0; i+1 < len(parts); i += 2 {
			hf = append(hf, hpack.HeaderField{Name: parts[i], Value: parts[i+1]})
			head.WriteString(parts[i] + ": " + parts[i+1] + "\r\n")
		}
		head.WriteString("\r\n")
		var r2 Request
		if !fields.Request(&r2, false, path, authority, hf) {
			return
		}
		var r1 Request
		_, res, reason := parse([]byte(head.String()), &r1, NewFields(cfg).rules)
		if res != answerable {
			t.Fatalf("HTTP/2 fields %q %q %q answerable; as HTTP/1.1: %v (%s)", path, authority, parts, res, reason)
		}
		if string(r1.Target) != string(r2.Target) || string(r1.Host) != string(r2.Host) || len(r1.AcceptEncoding) != len(r2.AcceptEncoding) {
			t.Fatalf("%q %q %q: HTTP/1.1 reads %q %q %q, HTTP/2 %q %q %q", path, authority, parts,
				r1.Target, r1.Host, r1.AcceptEncoding, r2.Target, r2.Host, r2.AcceptEncoding)
		}
	})
}
