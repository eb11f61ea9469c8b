package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCoalescingOneOriginFetchPerKey(t *testing.T) {
	p := newTestProxy(t, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "shared"})
	p.origin.delay = 200 * time.Millisecond
	const n = 50
	var wg sync.WaitGroup
	results := make([]string, n)
	bodies := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			p.h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/hot", nil))
			results[i] = w.Header().Get("Cache-Status")
			bodies[i] = w.Body.String()
		}()
	}
	wg.Wait()
	if got := p.origin.calls.Load(); got != 1 {
		t.Fatalf("origin requests = %d, want 1", got)
	}
	collapsed := 0
	for i := range n {
		if bodies[i] != "shared" {
			t.Fatalf("request %d body %q", i, bodies[i])
		}
		if strings.Contains(results[i], "collapsed") {
			collapsed++
		}
	}
	if collapsed == 0 {
		t.Errorf("no request reported collapsed: %v", results[:3])
	}
}

// TestSlowOriginOneFetchForAllWaiters: waiters on a slow URL wait for the
// one fetch under way instead of each starting their own (issue 11 item 11).
func TestSlowOriginOneFetchForAllWaiters(t *testing.T) {
	p := newTestProxy(t, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "slow"})
	p.origin.delay = 300 * time.Millisecond
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			p.h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/slow", nil))
			if w.Body.String() != "slow" {
				t.Errorf("body %q", w.Body.String())
			}
		}()
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if got := p.origin.calls.Load(); got != 1 {
		t.Fatalf("origin requests = %d, want 1: waiters must share the fetch under way", got)
	}
}

// TestCoalesceTimeoutAnswers504: a waiter that waits longer than the
// coalesce timeout gets a 504, never a second origin request.
func TestCoalesceTimeoutAnswers504(t *testing.T) {
	p := newTestProxy(t, func(c *Config) { c.CoalesceTimeout = 50 * time.Millisecond })
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "slow"})
	p.origin.delay = 400 * time.Millisecond
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			p.h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/slow", nil))
			codes[i] = w.Code
		}()
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if got := p.origin.calls.Load(); got != 1 {
		t.Fatalf("origin requests = %d, want 1", got)
	}
	if codes[0] != 200 || codes[1] != http.StatusGatewayTimeout || codes[2] != http.StatusGatewayTimeout {
		t.Fatalf("codes = %v, want [200 504 504]", codes)
	}
}

func TestCoalescingNeverSharesUncacheable(t *testing.T) {
	p := newTestProxy(t, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "private"}, body: "mine"})
	p.origin.delay = 100 * time.Millisecond
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			p.h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/private", nil))
			if strings.Contains(w.Header().Get("Cache-Status"), "collapsed") {
				t.Errorf("a private response was shared: %q", w.Header().Get("Cache-Status"))
			}
		}()
	}
	wg.Wait()
	if got := p.origin.calls.Load(); got != 5 {
		t.Fatalf("origin requests = %d, want 5", got)
	}
}

func TestCoalescingRespectsVary(t *testing.T) {
	arrived := make(chan struct{}, 2)
	release := make(chan struct{})
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Accept-Language")
		_, _ = io.WriteString(w, "lang="+r.Header.Get("Accept-Language"))
	}, nil)
	bodies := make(chan string, 2)
	ask := func(lang string) {
		bodies <- serve(h, "GET", "/v", "Accept-Language", lang).Body.String() + " for " + lang
	}
	go ask("en")
	<-arrived // the en fetch is under way: fr arrives while it is
	go ask("fr")
	select {
	case <-arrived: // fr did not wait for en's response: it fetched its own
	case <-time.After(300 * time.Millisecond):
		// fr is waiting on en's fill; once en answers, fr must see the
		// Vary mismatch and fetch for itself.
	}
	close(release)
	for range 2 {
		if b := <-bodies; b != "lang=en for en" && b != "lang=fr for fr" {
			t.Fatalf("got %q: a response for one language answered the other", b)
		}
	}
	if got := calls.Load(); got != 2 {
		t.Fatalf("origin requests = %d, want 2", got)
	}
}
