package h2server

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/edgecache/edge/hitpath"
)

// rvServer serves srv on a loopback listener (plain TCP: ServeConn takes
// any net.Conn).
func rvServer(t *testing.T, srv *Server) string {
	addr, _ := rvServerLn(t, srv)
	return addr
}

func rvServerLn(t *testing.T, srv *Server) (string, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); srv.ServeConn(context.Background(), c, nil) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); srv.Drain() })
	return ln.Addr().String(), ln
}

// rvClient is a raw-frame client: frames read go to a channel.
type rvClient struct {
	t      *testing.T
	nc     net.Conn
	fr     *http2.Framer
	wmu    sync.Mutex
	enc    *hpack.Encoder
	hb     bytes.Buffer
	frames chan http2.Frame
	done   chan error
}

func rvDial(t *testing.T, addr string, settings ...http2.Setting) *rvClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &rvClient{t: t, nc: nc, frames: make(chan http2.Frame, 4096), done: make(chan error, 1)}
	c.fr = http2.NewFramer(nc, nc)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.SetMaxReadFrameSize(1 << 24)
	c.enc = hpack.NewEncoder(&c.hb)
	_, _ = nc.Write([]byte(http2.ClientPreface))
	_ = c.fr.WriteSettings(settings...)
	go func() {
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				c.done <- err
				close(c.frames)
				return
			}
			// Copy DATA payloads: the framer reuses its buffer.
			if df, ok := f.(*http2.DataFrame); ok {
				cp := *df
				_ = cp
				c.frames <- &rvData{StreamID: df.StreamID, Data: bytes.Clone(df.Data()), End: df.StreamEnded()}
				continue
			}
			c.frames <- f
		}
	}()
	return c
}

type rvData struct {
	http2.FrameHeader
	StreamID uint32
	Data     []byte
	End      bool
}

func (c *rvClient) headers(id uint32, end bool, fields ...string) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		_ = c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hb.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rvClient) data(id uint32, end bool, p []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for len(p) > 16384 {
		if err := c.fr.WriteData(id, false, p[:16384]); err != nil {
			c.t.Fatal(err)
		}
		p = p[16384:]
	}
	if err := c.fr.WriteData(id, end, p); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rvClient) do(f func(fr *http2.Framer) error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := f(c.fr); err != nil {
		c.t.Fatal(err)
	}
}

// rvResp is what arrived for one stream.
type rvResp struct {
	status   string
	header   []hpack.HeaderField
	trailer  []hpack.HeaderField
	body     []byte
	ended    bool
	rst      http2.ErrCode
	gotRST   bool
	afterEnd []string // frames seen after END_STREAM or RST_STREAM
}

// collect reads frames until cond(resps) holds or timeout; it answers
// SETTINGS and PINGs are ignored. It returns the responses by stream.
func (c *rvClient) collect(timeout time.Duration, resps map[uint32]*rvResp, cond func(map[uint32]*rvResp) bool) (map[uint32]*rvResp, bool) {
	if resps == nil {
		resps = map[uint32]*rvResp{}
	}
	get := func(id uint32) *rvResp {
		r := resps[id]
		if r == nil {
			r = &rvResp{}
			resps[id] = r
		}
		return r
	}
	deadline := time.After(timeout)
	for !cond(resps) {
		select {
		case f, ok := <-c.frames:
			if !ok {
				return resps, cond(resps)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					c.do(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
				}
			case *http2.MetaHeadersFrame:
				r := get(f.StreamID)
				if r.ended || r.gotRST {
					r.afterEnd = append(r.afterEnd, "HEADERS")
				}
				if r.status == "" || f.PseudoValue("status") != "" && r.status[0] == '1' {
					r.status = f.PseudoValue("status")
					r.header = f.RegularFields()
				} else {
					r.trailer = f.RegularFields()
				}
				if f.StreamEnded() {
					r.ended = true
				}
			case *rvData:
				r := get(f.StreamID)
				if r.ended || r.gotRST {
					r.afterEnd = append(r.afterEnd, "DATA")
				}
				r.body = append(r.body, f.Data...)
				if f.End {
					r.ended = true
				}
			case *http2.RSTStreamFrame:
				r := get(f.StreamID)
				if r.ended || r.gotRST {
					r.afterEnd = append(r.afterEnd, "RST_STREAM")
				}
				r.gotRST, r.rst = true, f.ErrCode
			case *http2.GoAwayFrame:
				get(0).afterEnd = append(get(0).afterEnd, "GOAWAY "+f.ErrCode.String())
			case *http2.WindowUpdateFrame:
				// fine even after a stream's end: window updates may follow
			}
		case <-deadline:
			return resps, false
		}
	}
	return resps, true
}

func rvGet(path string) []string {
	return []string{":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", path}
}

func rvPost(path string, extra ...string) []string {
	return append([]string{":method", "POST", ":scheme", "https", ":authority", "a.test", ":path", path}, extra...)
}

func ended(ids ...uint32) func(map[uint32]*rvResp) bool {
	return func(m map[uint32]*rvResp) bool {
		for _, id := range ids {
			r := m[id]
			if r == nil || (!r.ended && !r.gotRST) {
				return false
			}
		}
		return true
	}
}

var _ = http.StatusOK

func hpackField(n, v string) hpack.HeaderField { return hpack.HeaderField{Name: n, Value: v} }

func hpackEncoder(w io.Writer) *hpack.Encoder { return hpack.NewEncoder(w) }

func hitpathFields() *hitpath.Fields { return hitpath.NewFields(hitpath.Config{}) }

func rvPairs(f []string) []hpack.HeaderField {
	var out []hpack.HeaderField
	for i := 0; i+1 < len(f); i += 2 {
		out = append(out, hpack.HeaderField{Name: f[i], Value: f[i+1]})
	}
	return out
}
