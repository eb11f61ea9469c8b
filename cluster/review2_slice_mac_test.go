package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/proxy"
)

// viaPeer is an ingress's fetcher reduced to what the climb does with the
// home's answer: climbTo, then settle (whole.go), the copy kept.
type viaPeer struct {
	c *Cluster
	p *Peer
}

func (v viaPeer) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	resp, ok, _ := v.c.climbTo(ctx, fr.Req, fr.Key, v.p, 2, nil, 0, proxy.WaitOrder{})
	if !ok {
		return proxy.Result{}, errors.New("the peer did not answer")
	}
	res, ok := v.c.settle(ctx, fr, resp, v.p.ID)
	if !ok {
		return proxy.Result{}, errors.New("the peer's answer failed")
	}
	res.Keep = true
	return res, nil
}

// flipRelay relays TCP to target and, on the first connection only,
// flips the 1001st byte after the first response's header: an on-path attacker
// on a cluster link without cluster.tls, which the MACs are there for.
func flipRelay(t *testing.T, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var first atomic.Bool
	first.Store(true)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			flip := first.Swap(false)
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() {
				defer c.Close()
				if flip {
					br := bufio.NewReader(up)
					for {
						line, err := br.ReadString('\n')
						if err != nil {
							return
						}
						_, _ = io.WriteString(c, line)
						if line == "\r\n" {
							break
						}
					}
					b := make([]byte, 1001)
					if _, err := io.ReadFull(br, b); err != nil {
						return
					}
					b[1000] ^= 1 // in the body's data, past any chunk-size line
					_, _ = c.Write(b)
					_, _ = io.Copy(c, br)
					return
				}
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return ln.Addr().String()
}

// A home's answer on the read loop carries Content-Length; net/http's
// signing writer always sent peers chunked answers with the body MAC in a
// trailer. An ingress with cache.slice_bytes that gets a large answer with
// a length slices it, storing each slice as it streams by (proxy/slice.go
// fromStream), long before the body MAC is checked at the body's end. A
// body byte altered on the way is then stored and served to every later
// client; the same tampering of net/http's chunked answer is refused and
// never stored.
func TestReview2LoopAnswerSlicedBeforeItsMACIsChecked(t *testing.T) {
	page := bytes.Repeat([]byte("0123456789abcdef"), 12<<10) // 192 KiB: three 64 KiB slices
	for _, tc := range []struct {
		viaLoop bool
		slice   int64
	}{{false, 64 << 10}, {true, 64 << 10}, {false, 0}, {true, 0}} {
		viaLoop := tc.viaLoop
		name := "net/http"
		if viaLoop {
			name = "read loop"
		}
		if tc.slice == 0 {
			name += " unsliced"
		}
		t.Run(name, func(t *testing.T) {
			home, ph, p, plain, in := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "max-age=600")
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Header().Set("Etag", `"v1"`)
				_, _ = w.Write(page)
			})
			// The home holds the page whole, in RAM.
			if _, got := signedGet(t, in, p, "GET", "/big", "climb"); got != string(page) {
				t.Fatal("fill")
			}
			ph.Wait()
			target := plain.Addr
			if viaLoop {
				target = p.Addr
			}
			in.cfg.PeerWholeBytes = 128 << 10 // cluster.peer_whole_bytes' default: the page streams past it
			relay := &Peer{ID: "n1", Addr: flipRelay(t, target)}

			pc := proxy.DefaultConfig()
			pc.SliceBytes = tc.slice
			store := proxy.NewStore(4<<20, 4)
			ingress := proxy.New(pc, store, viaPeer{in, relay}, proxy.NewMetrics(prometheus.NewRegistry(), store), nil)
			srv := httptest.NewServer(ingress)
			t.Cleanup(srv.Close)

			before := loopHits(home)
			get := func() ([]byte, int, error) {
				req, _ := http.NewRequest("GET", srv.URL+"/big", nil)
				req.Host = "h"
				resp, err := srv.Client().Do(req)
				if err != nil {
					return nil, 0, err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return b, resp.StatusCode, err
			}
			first, code, err1 := get() // the tampered answer: must reach the client cut, never whole
			ingress.Wait()
			t.Logf("first client: %d, %d bytes, err %v; loop hits %d", code, len(first), err1, loopHits(home)-before)
			if err1 == nil && code == http.StatusOK && !bytes.Equal(first, page) {
				t.Errorf("first client: a complete %d-byte answer that is not the page (the body MAC failed only after the last byte was out)", len(first))
			}
			second, _, err := get()
			if err != nil {
				t.Fatalf("second client: %v", err)
			}
			if !bytes.Equal(second, page) {
				i := 0
				for i < len(second) && i < len(page) && second[i] == page[i] {
					i++
				}
				t.Errorf("second client gets %d bytes differing from the page at byte %d (the relay's flip): a body the peer never sent, stored at the ingress", len(second), i)
			}
		})
	}
}
