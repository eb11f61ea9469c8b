package proxy

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestS70LastModifiedWithoutDateStillSlices: an origin that sends no Date
// (RFC 9110 §6.6.1: the recipient adds its own, its receipt time) and a
// Last-Modified a year old. The validator is as strong as one with a Date
// a year later; the large object should be sliced and stored, not passed
// to the origin whole on every request.
func TestS70LastModifiedWithoutDateStillSlices(t *testing.T) {
	for _, withDate := range []bool{true, false} {
		t.Run("date="+strconv.FormatBool(withDate), func(t *testing.T) { s70NoDate(t, withDate) })
	}
}

func s70NoDate(t *testing.T, withDate bool) {
	o := newSliceOrigin(5 << 19)
	lm := time.Now().Add(-365 * 24 * time.Hour).UTC()
	serveNoDate := func(w http.ResponseWriter, r *http.Request) {
		if !withDate {
			w.Header()["Date"] = nil // net/http's server sends none
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "video/mp4")
		if r.Header.Get("Range") != "" {
			o.ranged.Add(1)
			if !withDate {
				w.Header()["Date"] = nil
			}
			http.ServeContent(w, r, "", lm, bytes.NewReader(o.body))
			return
		}
		o.whole.Add(1)
		w.Header().Set("Last-Modified", lm.Format(http.TimeFormat))
		w.Header().Set("Content-Length", strconv.Itoa(len(o.body)))
		_, _ = w.Write(o.body)
	}
	h, _ := handlerProxy(t, serveNoDate, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 })
	for i := range 3 {
		w := serve(h, "GET", "/movie.mp4")
		if !bytes.Equal(w.Body.Bytes(), o.body) {
			t.Fatalf("read %d: %d, first wrong byte at %d", i, w.Code, s67FirstDiff(w.Body.Bytes(), o.body))
		}
		t.Logf("read %d: Cache-Status %q", i, w.Header().Get("Cache-Status"))
	}
	if o.whole.Load() > 1 {
		t.Errorf("three reads of a 2.5 MiB object (Last-Modified a year old, no Date) (Date sent: %v) cost %d whole and %d ranged origin requests; want it sliced and stored (at most one of each slice)", withDate, o.whole.Load(), o.ranged.Load())
	}
}
