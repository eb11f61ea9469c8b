package proxy

// Review s65. An origin that stores its objects gzipped and serves them so
// whatever the request says (an S3 bucket of objects uploaded with
// Content-Encoding: gzip), and honours Range on the gzip bytes. For a
// client that does not take gzip the edge decodes the whole answer (the
// 200 below is identity, tagged "s3-identity"), and a Range on a stored
// copy is a range of the decoded bytes. On a page the edge passes (larger
// than cache.max_object_bytes) the client's Range is forwarded and the
// origin's 206 of gzip bytes is relayed as it came: Content-Encoding: gzip
// to a client that sent Accept-Encoding: identity, and no Vary, though the
// 200 to the same request was identity with Vary: Accept-Encoding. The
// client cannot decode a slice out of the middle of a gzip stream, and
// compress.go's rule ("a body the origin encoded in a coding the client
// does not accept is decoded") is broken for exactly the requests that
// cannot be decoded. RFC 9110 §12.5.3 (identity is what this client
// takes); §14.2 lets the edge ignore the Range and send the decoded 200.

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/edgecache/edge/coding"
)

func TestS65PassedRangeOfAnOriginGzipBodyReachesAnIdentityClient(t *testing.T) {
	plain := []byte(page(20000))
	codec, _ := coding.NewCodec(coding.DefaultLevels)
	gzb, err := codec.Encode(coding.Gzip, plain)
	if err != nil {
		t.Fatal(err)
	}
	lm := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	p := newTestProxy(t, func(c *Config) {
		withProdCompression(c)
		c.MaxObjectBytes = 1000 // passed, not stored
		c.SliceBytes = 0
	})
	p.origin.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("ETag", `"s3"`)
		http.ServeContent(w, r, "", lm, bytes.NewReader(gzb))
	})
	id := map[string]string{"Accept-Encoding": "identity"}
	whole := p.do("GET", "/obj", id)
	if whole.Code != 200 || whole.Header().Get("Content-Encoding") != "" || !bytes.Equal(whole.Body.Bytes(), plain) {
		t.Fatalf("the whole answer: %d CE %q, %d bytes", whole.Code, whole.Header().Get("Content-Encoding"), whole.Body.Len())
	}
	w := p.do("GET", "/obj", map[string]string{"Accept-Encoding": "identity", "Range": "bytes=0-99"})
	if ce := w.Header().Get("Content-Encoding"); ce != "" {
		t.Errorf("Range from an Accept-Encoding: identity client: %d, Content-Encoding %q, Content-Range %q, Vary %q; "+
			"the 200 to the same client is identity (ETag %s): it must get identity bytes or the decoded 200, never a slice of gzip",
			w.Code, ce, w.Header().Get("Content-Range"), w.Header()["Vary"], whole.Header().Get("Etag"))
	}
	if w.Code == 206 && !bytes.Equal(w.Body.Bytes(), plain[:100]) {
		t.Errorf("the 206 is not bytes 0-99 of what the client takes")
	}
}
