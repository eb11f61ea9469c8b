package h2server

import (
	"bytes"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/edgecache/edge/hitpath"
)

var hitBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// internLimit bounds a connection's interned field values.
const internLimit = 256

// hitChunkBytes is how much of a hit's body is sent per write deadline
// when it waits for the client's window.
const hitChunkBytes = 32 << 10

// answerHit answers a GET or HEAD without a body from the cache, on the
// read loop, when the hit path may: it reports whether it did.
func (c *conn) answerHit(st *stream, rp requestFields, fields []hpack.HeaderField) bool {
	var r hitpath.Request
	if rp.authority == "" || !c.srv.Fields.Request(&r, rp.method == "HEAD", rp.path, rp.authority, fields) {
		return false
	}
	if c.tls != nil {
		r.ServerName = c.tls.ServerName
	}
	bp := hitBufPool.Get().(*[]byte)
	defer hitBufPool.Put(bp)
	a := &c.hitAns
	*a = hitpath.Answer{}
	defer func() { *a = hitpath.Answer{} }() // holds nothing until the next hit
	if !c.srv.Hits.AppendHit((*bp)[:0], &r, c.srv.dates.Line(time.Now()), c.nc.RemoteAddr(), a) {
		return false
	}
	c.srv.Metrics.countHit()
	status, out, inline := c.hitFields(a.Head)
	defer clear(out) // the fields' strings are the answer's: not held by an idle connection
	*bp = a.Head[:0] // the answer may have grown the buffer: keep it
	body := a.Body
	if body == nil {
		body = inline
	}
	if r.Head {
		body = nil
	}
	end := len(body) == 0
	c.mu.Lock()
	fits := !end && int64(len(body)) <= min(st.sendWindow, c.sendWindow)
	if fits {
		st.sendWindow -= int64(len(body))
		c.sendWindow -= int64(len(body))
	}
	maxFrame := c.peerMaxFrame
	c.mu.Unlock()
	if end || fits {
		c.wmu.Lock()
		err := c.writeHeadersLocked(st, status, out, end)
		for p := body; err == nil && len(p) > 0; {
			n := min(len(p), maxFrame)
			err = c.writeDataLocked(st, p[:n], n == len(p))
			p = p[n:]
		}
		c.wmu.Unlock()
		st.endLocal()
		if a.Release != nil {
			a.Release(a)
		}
		return true
	}
	// The client's window is smaller than the body: a goroutine waits for
	// it, as a handler would, with the body's own copy when it lives in
	// the loop's buffer.
	if a.Body == nil {
		body = bytes.Clone(body)
	}
	out = slices.Clone(out) // the loop's buffer is the next hit's
	held := *a              // released by the goroutine, when its writes are done
	c.mu.Lock()
	c.running++
	c.mu.Unlock()
	c.handlers.Add(1)
	go func() {
		defer func() {
			if held.Release != nil {
				held.Release(&held)
			}
			c.mu.Lock()
			c.running--
			c.mu.Unlock()
			c.handlers.Done()
		}()
		c.wmu.Lock()
		err := c.writeHeadersLocked(st, status, out, false)
		c.wmu.Unlock()
		// The write timeout is renewed for each chunk, as the HTTP/1.1
		// loop renews it: a slow reader of a large body is not a stalled one.
		for p := body; err == nil && len(p) > 0; {
			n := min(len(p), hitChunkBytes)
			var deadline time.Time
			if c.srv.WriteTimeout > 0 {
				deadline = time.Now().Add(c.srv.WriteTimeout)
			}
			err = st.sendData(p[:n], n == len(p), deadline)
			p = p[n:]
		}
		if err != nil {
			if err == errWriteTimeout {
				c.resetStream(st.id, http2.ErrCodeCancel)
			}
			_ = c.flush()
			return
		}
		st.endLocal()
		_ = c.flush()
	}()
	return true
}

// hitFields reads the HTTP/1.1 head the answerer wrote ("HTTP/1.1 200
// OK", then "Name: value" lines) as HTTP/2 fields: names lower-cased,
// connection-specific fields dropped. inline is the body that follows the
// head, if any. Names and values are interned per connection: a hit's
// fields repeat, and the encoder's table keeps the strings it indexes.
func (c *conn) hitFields(head []byte) (status int, fields []hpack.HeaderField, inline []byte) {
	status = int(head[9]-'0')*100 + int(head[10]-'0')*10 + int(head[11]-'0')
	end := bytes.Index(head, []byte("\r\n\r\n"))
	lines := head[bytes.IndexByte(head, '\n')+1 : end+2]
	inline = head[end+4:]
	fields = c.hitFieldsBuf[:0]
	for len(lines) > 0 {
		i := bytes.IndexByte(lines, '\n')
		line := lines[:i-1]
		lines = lines[i+1:]
		colon := bytes.IndexByte(line, ':')
		name, value := line[:colon], line[colon+2:]
		var lower [64]byte
		ln := lower[:0]
		if len(name) > len(lower) {
			ln = make([]byte, 0, len(name)) // a long stored field name: rare
		}
		for _, b := range name {
			if 'A' <= b && b <= 'Z' {
				b += 'a' - 'A'
			}
			ln = append(ln, b)
		}
		switch string(ln) {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			continue
		}
		fields = append(fields, hpack.HeaderField{Name: c.intern(ln), Value: c.intern(value)})
	}
	c.hitFieldsBuf = fields
	return status, fields, inline
}

// internMaxBytes is the longest value a connection interns: interning
// saves an allocation per hit for the short fields every answer repeats;
// a long one held per connection (a 1 MiB field an origin sends) made
// idle connections hold megabytes each (a review's
// TestS71InternedFieldValuesAreBoundedInBytes).
const internMaxBytes = 1 << 10

// intern returns b as a string, the same one each time while it is held.
func (c *conn) intern(b []byte) string {
	if len(b) > internMaxBytes {
		return string(b)
	}
	if s, ok := c.internStrings[string(b)]; ok {
		return s
	}
	if len(c.internStrings) >= internLimit {
		clear(c.internStrings)
	}
	s := string(b)
	c.internStrings[s] = s
	return s
}
