package hitpath

import (
	"bufio"
	"bytes"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestParseAccepts(t *testing.T) {
	raw := "GET /a/b%20c?x=1&y=%2F HTTP/1.1\r\nHost: Example.test:8080\r\nAccept-Encoding: gzip, br\r\n" +
		"Accept-Encoding: zstd\r\nUser-Agent: ua1\r\nUser-Agent: ua2\r\nReferer:  http://r/ \t\r\nCookie: a=b\r\n" +
		"Connection: Close\r\n\r\nGET /next HTTP/1.1\r\n"
	var r Request
	n, res, reason := parse([]byte(raw), &r, nil)
	if res != answerable {
		t.Fatalf("parse: %v %s", res, reason)
	}
	if want := strings.Index(raw, "GET /next"); n != want {
		t.Errorf("head length %d, want %d", n, want)
	}
	if r.Head || string(r.Target) != "/a/b%20c?x=1&y=%2F" || string(r.Host) != "Example.test:8080" || !r.Close {
		t.Errorf("request %+v", r)
	}
	if len(r.AcceptEncoding) != 2 || string(r.AcceptEncoding[0]) != "gzip, br" || string(r.AcceptEncoding[1]) != "zstd" {
		t.Errorf("accept-encoding %q", r.AcceptEncoding)
	}
	if string(r.UserAgent) != "ua1" || string(r.Referer) != "http://r/" {
		t.Errorf("user-agent %q referer %q", r.UserAgent, r.Referer)
	}
	if _, res, _ := parse([]byte("HEAD / HTTP/1.1\r\nHost: h\r\n\r\n"), &r, nil); res != answerable || !r.Head {
		t.Errorf("HEAD: %v %+v", res, r)
	}
}

// TestParseDeclines is the table of malformed and unusual heads: each must
// go to net/http (declined) or wait for more bytes (incomplete), never be
// answered here.
func TestParseDeclines(t *testing.T) {
	const h = "Host: h\r\n"
	cases := []struct {
		name, raw string
		res       parseResult
		reason    string
	}{
		{"empty", "", incomplete, ""},
		{"partial line", "GET / HT", incomplete, ""},
		{"partial head", "GET / HTTP/1.1\r\nHost: h\r\n", incomplete, ""},
		{"bare LF request line", "GET / HTTP/1.1\nHost: h\n\n", foreign, reasonSyntax},
		{"bare LF field", "GET / HTTP/1.1\r\nHost: h\n\r\n", foreign, reasonSyntax},
		{"bare CR", "GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n", foreign, reasonSyntax},
		{"POST", "POST / HTTP/1.1\r\n" + h + "\r\n", foreign, reasonMethod},
		{"lower-case get", "get / HTTP/1.1\r\n" + h + "\r\n", foreign, reasonMethod},
		{"leading CRLF", "\r\nGET / HTTP/1.1\r\n" + h + "\r\n", foreign, reasonMethod},
		{"HTTP/1.0", "GET / HTTP/1.0\r\n" + h + "\r\n", foreign, reasonVersion},
		{"two spaces", "GET  / HTTP/1.1\r\n" + h + "\r\n", foreign, reasonVersion},
		{"trailing space", "GET / HTTP/1.1 \r\n" + h + "\r\n", foreign, reasonVersion},
		{"absolute form", "GET http://h/ HTTP/1.1\r\n" + h + "\r\n", foreign, reasonVersion},
		{"asterisk", "GET * HTTP/1.1\r\n" + h + "\r\n", foreign, reasonVersion},
		{"non-ASCII target", "GET /\xc3\xa9 HTTP/1.1\r\n" + h + "\r\n", foreign, reasonVersion},
		{"double slash", "GET //evil/x HTTP/1.1\r\n" + h + "\r\n", handable, reasonTarget},
		{"fragment", "GET /a#b HTTP/1.1\r\n" + h + "\r\n", handable, reasonTarget},
		{"bad escape", "GET /a%zz HTTP/1.1\r\n" + h + "\r\n", handable, reasonTarget},
		{"short escape", "GET /a%2 HTTP/1.1\r\n" + h + "\r\n", handable, reasonTarget},
		{"no host", "GET / HTTP/1.1\r\n\r\n", foreign, reasonHost},
		{"two hosts", "GET / HTTP/1.1\r\n" + h + h + "\r\n", foreign, reasonHost},
		{"empty host", "GET / HTTP/1.1\r\nHost: \r\n\r\n", handable, reasonHost},
		{"host with userinfo", "GET / HTTP/1.1\r\nHost: a@b\r\n\r\n", handable, reasonHost},
		{"host with underscore", "GET / HTTP/1.1\r\nHost: a_b\r\n\r\n", handable, reasonHost},
		{"obs-fold", "GET / HTTP/1.1\r\n" + h + "X: a\r\n b\r\n\r\n", foreign, reasonSyntax},
		{"space before colon", "GET / HTTP/1.1\r\n" + h + "X : a\r\n\r\n", foreign, reasonSyntax},
		{"no colon", "GET / HTTP/1.1\r\n" + h + "X\r\n\r\n", foreign, reasonSyntax},
		{"empty name", "GET / HTTP/1.1\r\n" + h + ": a\r\n\r\n", foreign, reasonSyntax},
		{"control byte", "GET / HTTP/1.1\r\n" + h + "X: a\x01\r\n\r\n", foreign, reasonSyntax},
		{"NUL", "GET / HTTP/1.1\r\n" + h + "X: \x00\r\n\r\n", foreign, reasonSyntax},
		{"obs-text", "GET / HTTP/1.1\r\n" + h + "X: \xff\r\n\r\n", foreign, reasonSyntax},
		{"content-length", "GET / HTTP/1.1\r\n" + h + "Content-Length: 0\r\n\r\n", foreign, reasonFraming},
		{"transfer-encoding", "GET / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n", foreign, reasonFraming},
		{"smuggled TE case", "GET / HTTP/1.1\r\n" + h + "tRaNsFeR-eNcOdInG: chunked\r\n\r\n", foreign, reasonFraming},
		{"expect", "GET / HTTP/1.1\r\n" + h + "Expect: 100-continue\r\n\r\n", foreign, reasonFraming},
		{"upgrade", "GET / HTTP/1.1\r\n" + h + "Upgrade: websocket\r\n\r\n", foreign, reasonFraming},
		{"connection option", "GET / HTTP/1.1\r\n" + h + "Connection: Authorization\r\n\r\n", foreign, reasonFraming},
		{"connection list", "GET / HTTP/1.1\r\n" + h + "Connection: keep-alive, close\r\n\r\n", foreign, reasonFraming},
		{"range", "GET / HTTP/1.1\r\n" + h + "Range: bytes=0-1\r\n\r\n", handable, reasonField},
		{"if-none-match", "GET / HTTP/1.1\r\n" + h + "If-None-Match: \"x\"\r\n\r\n", handable, reasonField},
		{"if-modified-since", "GET / HTTP/1.1\r\n" + h + "If-Modified-Since: x\r\n\r\n", handable, reasonField},
		{"authorization", "GET / HTTP/1.1\r\n" + h + "Authorization: Basic x\r\n\r\n", handable, reasonField},
		{"cache-control", "GET / HTTP/1.1\r\n" + h + "Cache-Control: no-cache\r\n\r\n", handable, reasonField},
		{"pragma", "GET / HTTP/1.1\r\n" + h + "Pragma: no-cache\r\n\r\n", handable, reasonField},
		{"x-forwarded-proto", "GET / HTTP/1.1\r\n" + h + "X-Forwarded-Proto: https\r\n\r\n", handable, reasonField},
		{"many accept-encodings", "GET / HTTP/1.1\r\n" + h + strings.Repeat("Accept-Encoding: gzip\r\n", 5) + "\r\n", handable, reasonField},
		{"authorization then framing", "GET / HTTP/1.1\r\n" + h + "Authorization: x\r\nContent-Length: 3\r\n\r\nabc", foreign, reasonFraming},
	}
	for _, c := range cases {
		var r Request
		_, res, reason := parse([]byte(c.raw), &r, nil)
		if res != c.res || reason != c.reason {
			t.Errorf("%s: got %v %q, want %v %q", c.name, res, reason, c.res, c.reason)
		}
	}
}

// FuzzParseAgreesWithNetHTTP holds the parser to its promise: whatever it
// accepts, net/http reads as the same request (method, target, host, path
// and query as the cache key sees them, close, no body, the same length of
// head) and none of the fields that would change a hit's answer.
func FuzzParseAgreesWithNetHTTP(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"HEAD /a?b=c HTTP/1.1\r\nHost: h:1\r\nConnection: close\r\n\r\n",
		"GET /a%2Fb;c=d?e=%zz HTTP/1.1\r\nHost: [::1]:80\r\nAccept-Encoding: gzip\r\n\r\nGET",
		"GET /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n",
		"GET /?? HTTP/1.1\r\nhost: H\r\nUser-Agent: \t u \r\nReferer: r\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		n, res, _ := parse(b, &r, nil)
		if res != answerable && res != handable {
			return
		}
		br := bufio.NewReader(bytes.NewReader(b))
		req, err := http.ReadRequest(br)
		if err != nil {
			if res == answerable {
				t.Fatalf("accepted %q, net/http refuses it: %v", b, err)
			}
			return // net/http answers 400 and closes: nothing to keep in step with
		}
		if consumed := len(b) - br.Buffered(); consumed != n {
			t.Fatalf("%q: head of %d bytes, net/http read %d", b, n, consumed)
		}
		want := "GET"
		if r.Head {
			want = "HEAD"
		}
		switch {
		case req.Method != want:
			t.Fatalf("%q: method %q, net/http %q", b, want, req.Method)
		case req.ContentLength != 0 || req.Body != http.NoBody:
			t.Fatalf("%q: net/http sees a body (length %d)", b, req.ContentLength)
		case req.Close != r.Close:
			t.Fatalf("%q: close %v, net/http %v", b, r.Close, req.Close)
		case req.Proto != "HTTP/1.1":
			t.Fatalf("%q: net/http proto %q", b, req.Proto)
		}
		if res == handable {
			return
		}
		path, query, _ := strings.Cut(string(r.Target), "?")
		switch {
		case req.RequestURI != string(r.Target):
			t.Fatalf("%q: target %q, net/http %q", b, r.Target, req.RequestURI)
		case req.Host != string(r.Host):
			t.Fatalf("%q: host %q, net/http %q", b, r.Host, req.Host)
		case req.URL.EscapedPath() != path || req.URL.RawQuery != query:
			t.Fatalf("%q: path %q query %q, net/http %q %q", b, path, query, req.URL.EscapedPath(), req.URL.RawQuery)
		case req.Header.Get("Referer") != string(r.Referer) || req.Header.Get("User-Agent") != string(r.UserAgent):
			t.Fatalf("%q: referer/user-agent differ from net/http's", b)
		}
		ae := req.Header["Accept-Encoding"]
		if len(ae) != len(r.AcceptEncoding) {
			t.Fatalf("%q: accept-encoding %q, net/http %q", b, r.AcceptEncoding, ae)
		}
		for i := range ae {
			if ae[i] != string(r.AcceptEncoding[i]) {
				t.Fatalf("%q: accept-encoding %q, net/http %q", b, r.AcceptEncoding, ae)
			}
		}
		for _, name := range append(declinedFields, framingFields...) {
			if _, ok := req.Header[http.CanonicalHeaderKey(name)]; ok {
				t.Fatalf("%q: answerable with %s", b, name)
			}
		}
	})
}

// BenchmarkParse reads a browser-like request head.
func BenchmarkParse(b *testing.B) {
	head := []byte("GET /static/app.js?v=3 HTTP/1.1\r\nHost: www.example.com\r\nConnection: keep-alive\r\n" +
		"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36\r\n" +
		"Accept: */*\r\nSec-Fetch-Site: same-origin\r\nSec-Fetch-Mode: no-cors\r\nSec-Fetch-Dest: script\r\n" +
		"Referer: https://www.example.com/\r\nAccept-Encoding: gzip, deflate, br, zstd\r\nAccept-Language: en-GB,en;q=0.9\r\n" +
		"Cookie: session=abc123; theme=dark\r\n\r\n")
	var r Request
	b.SetBytes(int64(len(head)))
	b.ReportAllocs()
	for b.Loop() {
		if _, res, _ := parse(head, &r, nil); res != answerable {
			b.Fatal(res)
		}
	}
}

// TestFieldTablesAgree: the switch in fieldOf and the lists the tests and
// docs use name the same fields.
func TestFieldTablesAgree(t *testing.T) {
	for _, name := range declinedFields {
		if fieldOf([]byte(strings.ToUpper(name))) != fieldDecline {
			t.Errorf("%s is not declined", name)
		}
	}
	for _, name := range framingFields {
		if fieldOf([]byte(name)) != fieldFraming {
			t.Errorf("%s is not framing", name)
		}
	}
	// Fields the cache keys (package reqfield) send the request to
	// ServeHTTP, whatever their length; standard ones do not.
	for name, want := range map[string]field{
		"X-Very-Long-Field-Name-Beyond-The-Buffer": fieldKeyed,
		"X-Forwarded-Prefix":                       fieldForwarding, // replaced first (counted)
		"X_Forwarded_Prefix":                       fieldDropped,    // dropped (counted)
		"Sec-Fetch-Mode":                           fieldOther,
		"Accept-Language":                          fieldOther,
		"X-Requested-With":                         fieldKeyed,
		strings.Repeat("x-", 40) + "a":             fieldKeyed,
		strings.Repeat("x_", 40) + "a":             fieldDropped,
		"Sec-Ch-Ua-Platform-Version-Which-Is-Long-Enough-To-Pass-The-Buffer": fieldOther,
	} {
		if got := fieldOf([]byte(name)); got != want {
			t.Errorf("fieldOf(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestStrippedFieldsAreIgnored(t *testing.T) {
	var r Request
	raw := []byte("GET / HTTP/1.1\r\nHost: h\r\nAccept-Encoding: gzip\r\nUser-Agent: u\r\n\r\n")
	if _, res, _ := parse(raw, &r, &fieldRules{strip: []string{"accept-encoding"}}); res != answerable || len(r.AcceptEncoding) != 0 || string(r.UserAgent) != "u" {
		t.Fatalf("stripped Accept-Encoding read: %v %q", res, r.AcceptEncoding)
	}
}

// FuzzKeptFieldsAreNetHTTPs: with Config.KeepFields, a request the loop
// gives its answerer carries exactly the header net/http would make of the
// same bytes (Host aside), names canonical and values in order, so that a
// MAC over one is a MAC over the other (package cluster, peerhit.go).
func FuzzKeptFieldsAreNetHTTPs(f *testing.F) {
	for _, s := range []string{
		"GET /p HTTP/1.1\r\nHost: h\r\nEdge-Mode: climb\r\nedge-hop: 1\r\nCache-Control: only-if-cached\r\n\r\n",
		"GET /p HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a:  2 \r\nX-Forwarded-Proto: https\r\n\r\n",
		"GET /p HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n",
		"HEAD /p?q HTTP/1.1\r\nHost: h\r\nX-Empty:\r\nAccept-Encoding: gzip\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	rules := &fieldRules{keep: true, own: []string{"cache-control", "x-forwarded-proto"}}
	f.Add([]byte("GET /p HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X-F: 1\r\n", maxKeptFields) + "Content-Length: 5\r\n\r\nhello"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r, plain Request
		n, res, _ := parse(b, &r, rules)
		// Keeping fields never hides what makes a request net/http's for
		// good (a body, Upgrade…), however many lines come first.
		if n0, res0, _ := parse(b, &plain, nil); (res0 == foreign) != (res == foreign) || (res0 != foreign && n0 != n) {
			t.Fatalf("%q: kept %v (%d bytes), without keeping %v (%d bytes)", b, res, n, res0, n0)
		}
		if res != answerable {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			t.Fatalf("kept %q, net/http refuses it: %v", b, err)
		}
		if _, ok := req.Header["Pragma"]; ok {
			return // net/http may add Cache-Control beside it; the answerer declines Pragma
		}
		got := http.Header{}
		for _, fl := range r.Fields {
			k := http.CanonicalHeaderKey(string(fl.Name))
			got[k] = append(got[k], string(fl.Value))
		}
		if len(got) != len(req.Header) {
			t.Fatalf("%q: kept %q, net/http %q", b, got, req.Header)
		}
		for k, vs := range req.Header {
			if !slices.Equal(got[k], vs) {
				t.Fatalf("%q: %s kept %q, net/http %q", b, k, got[k], vs)
			}
		}
	})
}

// TestKeepFields: every field but Host in order; the answerer's own fields
// never hand a request over, the others as without KeepFields; too many
// lines go to net/http.
func TestKeepFields(t *testing.T) {
	rules := &fieldRules{keep: true, own: []string{"cache-control"}}
	var r Request
	_, res, _ := parse([]byte("GET /p HTTP/1.1\r\nEdge-Mode: probe\r\nHost: h\r\nCache-Control: only-if-cached\r\nUser-Agent: 2\r\n\r\n"), &r, rules)
	if res != answerable || len(r.Fields) != 3 || string(r.Fields[0].Name) != "Edge-Mode" || string(r.Fields[2].Value) != "2" {
		t.Fatalf("res %v, fields %q", res, r.Fields)
	}
	for _, head := range []string{
		"GET /p HTTP/1.1\r\nHost: h\r\nAuthorization: x\r\n\r\n",
		"GET /p HTTP/1.1\r\nHost: h\r\nIf-None-Match: x\r\n\r\n",
		"GET /p HTTP/1.1\r\nHost: h\r\nX-Forwarded-Proto: https\r\n\r\n", // not this rule set's own
		"GET /p HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X-F: 1\r\n", maxKeptFields+1) + "\r\n",
	} {
		if _, res, _ := parse([]byte(head), &r, rules); res != handable {
			t.Errorf("%q: %v, want handed over", head, res)
		}
	}
	// Without KeepFields nothing is kept, and the buffer is reused.
	parse([]byte("GET /p HTTP/1.1\r\nHost: h\r\nX-B: 2\r\n\r\n"), &r, nil)
	if r.Fields != nil {
		t.Errorf("fields kept without KeepFields: %q", r.Fields)
	}
}

// TestDroppedAndForwardingFieldsAreCounted: the hit path counts the
// field names the cache drops or replaces as ServeHTTP's sanitize counts
// them (edge_request_fields_total): a name once however many lines carry
// it, a stripped one not at all.
func TestDroppedAndForwardingFieldsAreCounted(t *testing.T) {
	for _, tc := range []struct {
		name                string
		fields              string
		rules               *fieldRules
		dropped, forwarding int
	}{
		{"none", "Accept: */*\r\n", nil, 0, 0},
		{"one of each", "X_Custom: 1\r\nX-Forwarded-For: 10.0.0.1\r\n", nil, 1, 1},
		{"a name on two lines counts once", "X-Forwarded-For: a\r\nx-forwarded-for: b\r\nX_A: 1\r\nX_B: 2\r\n", nil, 2, 1},
		{"stripped", "X-Forwarded-For: a\r\nX_Custom: 1\r\n", &fieldRules{strip: []string{"x-forwarded-for", "x_custom"}}, 0, 0},
	} {
		var r Request
		raw := "GET /p HTTP/1.1\r\nHost: a.test\r\n" + tc.fields + "\r\n"
		if _, res, reason := parse([]byte(raw), &r, tc.rules); res != answerable {
			t.Fatalf("%s: parse = %d (%s), want answerable", tc.name, res, reason)
		}
		if r.Dropped != tc.dropped || r.Forwarding != tc.forwarding {
			t.Errorf("%s: dropped %d, forwarding %d; want %d, %d", tc.name, r.Dropped, r.Forwarding, tc.dropped, tc.forwarding)
		}
	}
}
