package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fillWaiters counts the goroutines blocked in fill.wait.
func fillWaiters() int {
	buf := make([]byte, 4<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "proxy.(*fill).wait(")
}

// TestS39RefusedVariantFillAfterAVaryPassIsNotCollapsed: fetchAndServe's
// loop has two passes, and 905f5c1 spends the second on asking again
// after a refused leader. A request whose first pass already used it (it
// joined the URL's fill, which came back for another variant: Vary) and
// whose second pass joined its own variant's fill, whose leader was then
// refused a slot, falls out of the loop to lead(nil): an uncoalesced
// fetch. Every such waiter fetches for itself: four French readers who
// would share one fetch ask the origin four times (the commit's comment:
// "asks again once (and leads, or joins whoever leads now)").
func TestS39RefusedVariantFillAfterAVaryPassIsNotCollapsed(t *testing.T) {
	releaseEn := make(chan struct{})
	var frCalls, enCalls atomic.Int64
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		lang := r.Header.Get("Accept-Language")
		if lang == "en" {
			enCalls.Add(1)
			<-releaseEn
		} else {
			frCalls.Add(1)
			time.Sleep(300 * time.Millisecond) // long enough for the others to join, were they let
		}
		w.Header().Set("Vary", "Accept-Language")
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page "+lang)
	}, nil)
	front := httptest.NewServer(h)
	defer front.Close()
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(lang string) (int, string) {
		req, _ := http.NewRequest("GET", front.URL+"/v", nil)
		req.Header.Set("Accept-Language", lang)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); get("en") }() // leads the URL's fill (no Vary known yet)
	waitUntil(t, "the English reader leads", func() bool { return enCalls.Load() == 1 })
	time.Sleep(50 * time.Millisecond)
	const n = 4
	type answer struct {
		code int
		body string
	}
	answers := make(chan answer, n)
	for range n {
		wg.Add(1)
		go func() { defer wg.Done(); c, b := get("fr"); answers <- answer{c, b} }()
	}
	waitUntil(t, "the French readers join the URL's fill", func() bool { return fillWaiters() == n })
	// The French variant's fill, whose leader is about to be refused a
	// slot (what lead does in that case is done below by hand).
	frReq := httptest.NewRequest("GET", front.URL+"/v", nil)
	frReq.Header.Set("Accept-Language", "fr")
	names, _ := VaryNames(http.Header{"Vary": {"Accept-Language"}})
	ckey := coalesceKey(h.requestKey(frReq), h.varyKey(names, frReq))
	f, leader := h.co.join(ckey, h.purges.Load(), fillWait{})
	if !leader {
		t.Fatal("the test's French fill did not lead")
	}
	close(releaseEn) // the English page comes back: Vary: Accept-Language
	waitUntil(t, "the French readers join their variant's fill", func() bool { return fillWaiters() == n })
	h.co.done(ckey, f)
	f.publish(nil, false, errOverload)
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.code != 200 || a.body != "page fr" {
			t.Errorf("a French reader got %d %q", a.code, a.body)
		}
	}
	if got := frCalls.Load(); got != 1 {
		t.Fatalf("the origin was asked %d times for the French page by %d readers who asked again together after its leader's refusal, want 1: "+
			"the Vary pass and the ask-again share fetchAndServe's two passes, and with both spent each reader leads an uncoalesced fetch (lead(w, r, nil, \"\", m))", got, n)
	}
}
