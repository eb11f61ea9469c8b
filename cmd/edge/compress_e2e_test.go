package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/coding"
)

// countingOrigin serves a compressible HTML page and a script, and counts
// the requests for each path and the Accept-Encoding each one carried.
type countingOrigin struct {
	mu    sync.Mutex
	calls map[string]int
	ae    map[string]bool
	srv   *httptest.Server
}

// compressPage is the page the browser loads. Its script reads the
// Content-Encoding the edge sent (a same-origin request sees every field)
// and the transfer and decoded sizes of the navigation, and writes them
// into the document for --dump-dom to show.
func compressPage() string {
	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><title>compression</title></head><body><h1>edge compression</h1><ul>`)
	for i := range 600 {
		fmt.Fprintf(&b, "<li class=\"row\">row %d of a page that compresses well</li>\n", i)
	}
	b.WriteString(`</ul><pre id="out"></pre><script>
var x = new XMLHttpRequest();
x.open("GET", location.pathname + "?probe", false);
x.send();
var xhr = "xhr-encoding=" + x.getResponseHeader("content-encoding") +
  " xhr-intact=" + (x.responseText.indexOf("row 599 of") > 0);
document.getElementById("out").textContent = xhr + " nav-pending";
// The navigation's sizes are set when its body has all arrived, which an
// inline script can run before (on a loaded machine it did: 0/0); the load
// event comes after, and --dump-dom waits for it.
addEventListener("load", function () {
  var nav = performance.getEntriesByType("navigation")[0];
  document.getElementById("out").textContent = xhr +
    " nav-smaller=" + (nav.encodedBodySize > 0 && nav.encodedBodySize * 3 < nav.decodedBodySize) +
    " nav-sizes=" + nav.encodedBodySize + "/" + nav.decodedBodySize;
});
</script></body></html>`)
	return b.String()
}

func newCountingOrigin(t *testing.T) *countingOrigin {
	o := &countingOrigin{calls: map[string]int{}, ae: map[string]bool{}}
	page := compressPage()
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.calls[r.URL.RequestURI()]++
		o.ae[r.Header.Get("Accept-Encoding")] = true
		o.mu.Unlock()
		w.Header().Set("Cache-Control", "public, max-age=300")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("ETag", `"page-1"`)
		_, _ = io.WriteString(w, page)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *countingOrigin) count(uri string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[uri]
}

// fetchDecoded gets url with an Accept-Encoding and returns the coding the
// edge chose and the decoded body.
func fetchDecoded(t *testing.T, url, ae string) (string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if ae != "" {
		req.Header.Set("Accept-Encoding", ae)
	}
	// DisableCompression: the transport must neither add gzip nor decode.
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	enc, ok := coding.OfBody(resp.Header["Content-Encoding"])
	if !ok {
		t.Fatalf("%s: Content-Encoding %q", url, resp.Header["Content-Encoding"])
	}
	codec, _ := coding.NewCodec(coding.DefaultLevels)
	body, err := codec.Decode(enc, raw, 16<<20)
	if err != nil {
		t.Fatalf("%s (%s): %v", url, enc, err)
	}
	return resp.Header.Get("Content-Encoding"), string(body)
}

// TestCompressionInChromium loads a page through an edge node in headless
// Chromium: the browser asks for "gzip, deflate, br, zstd" and must get br
// for the stored page (once its form is made) and zstd for a streamed miss,
// decoded intact; then clients asking for every other coding get the same
// page, and the origin sees one request, asked for identity.
func TestCompressionInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process and a browser")
	}
	bin := chromium(t)
	o := newCountingOrigin(t)
	pub, adm := freeAddr(t), freeAddr(t)
	startEdge(t, "serve", "--origin", o.srv.URL, "--listen", pub, "--admin-listen", adm, "--node-id", "edge-c")
	waitUp(t, "http://"+adm+"/readyz")

	// Stored first: the browser's navigation is then a hit, encoded once
	// from the whole body. (A miss encodes while streaming, and its ratio
	// depends on how often the upstream pauses, which on a loaded machine
	// is often: that is the streaming path's business, tested elsewhere.)
	if enc, body := fetchDecoded(t, "http://"+pub+"/page.html", "identity"); body != compressPage() {
		t.Fatalf("identity fetch (%s): %d bytes differ from the page", enc, len(body))
	}
	// The browser's first coded hit would be encoded live (in zstd, the
	// cheapest coder it takes) while the br form is made in the
	// background: ask until the form answers.
	for i := 0; ; i++ {
		if enc, _ := fetchDecoded(t, "http://"+pub+"/page.html", "gzip, deflate, br, zstd"); enc == "br" {
			break
		}
		if i == 100 {
			t.Fatal("no stored br form after 5 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	dom := string(headless(t, bin, "--dump-dom", "http://"+pub+"/page.html"))
	// The navigation is a hit on the stored br form; the script's request
	// (?probe) is a miss, encoded as it streams in the cheapest coder the
	// browser takes: zstd, which Chromium decodes.
	for _, want := range []string{"xhr-encoding=zstd", "xhr-intact=true", "nav-smaller=true"} {
		if !strings.Contains(dom, want) {
			out, _, _ := strings.Cut(dom[max(strings.Index(dom, `<pre id="out">`), 0):], "</pre>")
			// nav-sizes (encoded/decoded bytes of the navigation) says why
			// a nav-smaller=false was false. It read 0/0 in CI (857ffeb)
			// while the sizes were read by the inline script, before the
			// body had all arrived; they are now read at the load event.
			t.Fatalf("the browser's page lacks %q: %s", want, out)
		}
	}
	page := compressPage()
	for _, ae := range []string{"gzip, deflate, br, zstd", "gzip", "zstd", "br;q=0.5, gzip;q=0.9", "identity", ""} {
		enc, body := fetchDecoded(t, "http://"+pub+"/page.html", ae)
		if body != page {
			t.Fatalf("Accept-Encoding %q (%s): the decoded body differs", ae, enc)
		}
	}
	if n := o.count("/page.html"); n != 1 {
		t.Errorf("the origin saw %d requests for the page, want 1 whatever the codings asked", n)
	}
	o.mu.Lock()
	for ae := range o.ae {
		if ae != "identity" {
			t.Errorf("the origin was asked with Accept-Encoding %q", ae)
		}
	}
	o.mu.Unlock()
	if v := metric(t, adm, `edge_compression_responses_total{encoding="br"}`); v < 1 {
		t.Errorf("edge_compression_responses_total{br} = %v", v)
	}
}

// TestCompressionAcrossPeers runs two nodes: whichever fetches a page from
// the other gets the identity form, every client gets its own coding from
// its own node, and the origin sees one request.
func TestCompressionAcrossPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	o := newCountingOrigin(t)
	a := &testNode{id: "edge-a", pub: freeAddr(t), adm: freeAddr(t), peer: freeAddr(t)}
	b := &testNode{id: "edge-b", pub: freeAddr(t), adm: freeAddr(t), peer: freeAddr(t)}
	peers := a.id + "=" + a.peer + "," + b.id + "=" + b.peer
	for _, n := range []*testNode{a, b} {
		startEdge(t, "serve", "--origin", o.srv.URL, "--listen", n.pub, "--admin-listen", n.adm,
			"--node-id", n.id, "--cluster-listen", n.peer, "--peers", peers, "--secret", "compress-test-secret-0123")
	}
	for _, n := range []*testNode{a, b} {
		waitUp(t, "http://"+n.adm+"/readyz")
	}
	waitFor(t, "the peers to trust each other", 10*time.Second, func() bool {
		return metric(t, a.adm, "edge_view_members") == 2 && metric(t, b.adm, "edge_view_members") == 2
	})
	page := compressPage()
	for i, ae := range []string{"br", "zstd", "gzip", "", "br"} {
		for _, n := range []*testNode{a, b} {
			uri := fmt.Sprintf("/p%d.html", i%2)
			enc, body := fetchDecoded(t, "http://"+n.pub+uri, ae)
			if body != page || enc != map[string]string{"br": "br", "zstd": "zstd", "gzip": "gzip", "": ""}[ae] {
				t.Fatalf("%s %s with %q: got %q", n.id, uri, ae, enc)
			}
		}
	}
	for _, uri := range []string{"/p0.html", "/p1.html"} {
		if n := o.count(uri); n != 1 {
			t.Errorf("the origin saw %d requests for %s, want 1 for the cluster", n, uri)
		}
	}
	// The node that fetched from its peer was answered in identity: the
	// peer counted identity responses it could have compressed.
	ident := metric(t, a.adm, `edge_compression_responses_total{encoding="identity"}`) + metric(t, b.adm, `edge_compression_responses_total{encoding="identity"}`)
	plain := 2.0 // the two client requests above without Accept-Encoding
	if ident <= plain {
		t.Errorf("identity responses %v: the peers did not exchange the identity form", ident)
	}
}
