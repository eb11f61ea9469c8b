package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echoOrigin renders every request field into a cacheable page, as an
// origin does that trusts its proxy for X-Forwarded-Prefix, -Port, X-Host
// and the rest (Flask's ProxyFix, Symfony's trusted headers, Spring's
// forwarded-header filter): whatever reaches it can end up in the page.
func echoOrigin(seen *[]http.Header, mu *sync.Mutex) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		*seen = append(*seen, r.Header.Clone())
		mu.Unlock()
		names := make([]string, 0, len(r.Header))
		for k := range r.Header {
			names = append(names, k)
		}
		sort.Strings(names)
		w.Header().Set("Cache-Control", "max-age=60")
		for _, k := range names {
			_, _ = io.WriteString(w, k+": "+strings.Join(r.Header[k], ",")+"\n")
		}
	}
}

// TestClientForwardingFieldsNeverPoisonThePage: one request with a
// forwarding-family field (the nine the review named, relatives the lists
// do not spell out, and underscore spellings CGI origins read as dashes)
// must neither reach the origin nor change the page a later visitor gets.
func TestClientForwardingFieldsNeverPoisonThePage(t *testing.T) {
	hostile := []string{
		"X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Scheme", "X-Forwarded-Ssl", "X-Forwarded-Server",
		"X-Host", "X-Original-Host", "X-Http-Method-Override", "Front-End-Https",
		"X-Forwarded-Uri", "X-Forwarded-Path", "X-Original-Url", "X-Rewrite-Url", "X-Method-Override", "X-Http-Method",
		"X-Url-Scheme", "True-Client-Ip", "X-Client-Ip", "X-Real-Ip", "X-Forwarded-For", "X-Forwarded-Host", "Forwarded",
		"X_Forwarded_Prefix", "X_Forwarded_Host", "X-Forwarded_Port", "Edge-Mode",
	}
	for _, field := range hostile {
		t.Run(field, func(t *testing.T) {
			var seen []http.Header
			var mu sync.Mutex
			h, _ := handlerProxy(t, echoOrigin(&seen, &mu), nil)
			attacker := httptest.NewRequest("GET", "http://example.com/page", nil)
			attacker.Header[field] = []string{"//evil.example"} // as sent, not canonicalised
			h.ServeHTTP(httptest.NewRecorder(), attacker)
			h.Wait()
			victim := serve(h, "GET", "/page")
			if strings.Contains(victim.Body.String(), "evil") {
				t.Fatalf("a visitor got a page made from another client's %s:\n%s", field, victim.Body.String())
			}
			mu.Lock()
			defer mu.Unlock()
			for _, hd := range seen {
				for k, v := range hd {
					if strings.Contains(strings.Join(v, ","), "evil") {
						t.Errorf("the origin saw the client's %s as %s: %q", field, k, v)
					}
				}
			}
		})
	}
}

// TestUnknownFieldsAreKeyed: a field the cache does not know reaches the
// origin (an API may need it) but selects a variant of its own, so the
// page the origin made from it goes to requests with the same value only.
// Purging the URL removes every such variant.
func TestUnknownFieldsAreKeyed(t *testing.T) {
	var seen []http.Header
	var mu sync.Mutex
	h, calls := handlerProxy(t, echoOrigin(&seen, &mu), nil)
	if w := serve(h, "GET", "/p", "X-Asset-Base", "//evil.example"); !strings.Contains(w.Body.String(), "X-Asset-Base: //evil.example") {
		t.Fatalf("the origin did not see the unknown field:\n%s", w.Body.String())
	}
	w := serve(h, "GET", "/p")
	if strings.Contains(w.Body.String(), "evil") {
		t.Fatalf("a plain request got the keyed variant:\n%s", w.Body.String())
	}
	if cs := w.Header().Get("Cache-Status"); !strings.Contains(cs, "fwd=") {
		t.Fatalf("a plain request was a hit of the keyed variant: %q", cs)
	}
	for _, want := range []struct{ value, cs string }{{"", "hit"}, {"//evil.example", "hit"}, {"//other.example", "fwd="}} {
		var w *httptest.ResponseRecorder
		if want.value == "" {
			w = serve(h, "GET", "/p")
		} else {
			w = serve(h, "GET", "/p", "x-asset-base", want.value)
		}
		if cs := w.Header().Get("Cache-Status"); !strings.Contains(cs, want.cs) {
			t.Errorf("X-Asset-Base %q: Cache-Status %q, want %q", want.value, cs, want.cs)
		}
		if want.value != "//evil.example" && strings.Contains(w.Body.String(), "evil") {
			t.Errorf("X-Asset-Base %q got evil's variant", want.value)
		}
	}
	before := calls.Load()
	if n, err := h.Purge(PurgeRequest{URL: "http://example.com/p"}); err != nil || n != 3 {
		t.Fatalf("purge removed %d variants (%v), want 3", n, err)
	}
	serve(h, "GET", "/p", "X-Asset-Base", "//evil.example")
	if calls.Load() != before+1 {
		t.Fatal("the keyed variant survived a purge of its URL")
	}
}

// TestKeyedFieldNeverCollapsesIntoAPlainFill: a plain request that arrives
// while a request with an unknown field is fetching must not be given that
// fetch's answer.
func TestKeyedFieldNeverCollapsesIntoAPlainFill(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int32
	var seen []http.Header
	var mu sync.Mutex
	echo := echoOrigin(&seen, &mu)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		<-release
		echo(w, r)
	}, nil)
	var wg sync.WaitGroup
	var attackerBody, victimBody string
	wg.Add(2)
	go func() {
		defer wg.Done()
		attackerBody = serve(h, "GET", "/slow", "X-Asset-Base", "//evil.example").Body.String()
	}()
	for started.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	go func() {
		defer wg.Done()
		victimBody = serve(h, "GET", "/slow").Body.String()
	}()
	// The victim either leads its own fetch (the origin sees a second
	// request) or is still waiting; either way it never joins.
	deadline := time.Now().Add(5 * time.Second)
	for started.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if !strings.Contains(attackerBody, "evil") {
		t.Fatalf("the attacker's own request lost its field:\n%s", attackerBody)
	}
	if strings.Contains(victimBody, "evil") {
		t.Fatalf("a plain request collapsed into the keyed fetch:\n%s", victimBody)
	}
	if started.Load() != 2 {
		t.Fatalf("origin requests = %d, want 2 (one per variant)", started.Load())
	}
}

// TestUnkeyedHeadersConfig: a field the operator declares unkeyed is
// forwarded and shared, like a standard one.
func TestUnkeyedHeadersConfig(t *testing.T) {
	var seen []http.Header
	var mu sync.Mutex
	h, calls := handlerProxy(t, echoOrigin(&seen, &mu), func(c *Config) { c.UnkeyedRequestHeaders = []string{"x-app-version"} })
	serve(h, "GET", "/v", "X-App-Version", "1")
	if w := serve(h, "GET", "/v"); !strings.Contains(w.Header().Get("Cache-Status"), "hit") || calls.Load() != 1 {
		t.Fatalf("an unkeyed field split the cache: %q, %d origin requests", w.Header().Get("Cache-Status"), calls.Load())
	}
}

// TestKeyedValuesNeverReachTheDisk: a custom field may carry a credential;
// the variant key written with the entry holds a digest of it, not it.
func TestKeyedValuesNeverReachTheDisk(t *testing.T) {
	h, _, tier, dir := diskProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		_, _ = io.WriteString(w, "page")
	}, nil)
	serveFlushed(t, h, tier, "GET", "/k", "X-Api-Key", "sk-live-secret-123")
	if filesContain(t, dir, "sk-live-secret-123") {
		t.Fatal("a keyed field's value was written to disk")
	}
}
