package cluster

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
)

// s51ShortWindowOrigin answers every page fresh for a second, usable
// stale for three more while refreshed (stale-while-revalidate) and for
// three more on error (stale-if-error), with a body naming the fetch; it
// fails every fetch while down.
type s51ShortWindowOrigin struct {
	n    atomic.Int64
	down atomic.Bool
}

func (o *s51ShortWindowOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	if o.down.Load() {
		return proxy.Result{}, errors.New("origin down")
	}
	n := o.n.Add(1)
	h := http.Header{"Cache-Control": {"public, max-age=1, stale-while-revalidate=3, stale-if-error=3"}, "Content-Type": {"text/plain"}}
	body := "v" + strconv.FormatInt(n, 10)
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}, nil
}

// TestS51IngressOwnOldCopyLosesThePeersStaleFallback (failed on cd66361;
// mended: a revalidation's failure is answered with the peer's stale copy
// too, kept by nobody: fallbackResult).
//
// Steps: A (an ingress) keeps a copy of its own of a page (max-age=1,
// stale-while-revalidate=3, stale-if-error=3). Later X fetches the page
// afresh and is positively indicated at A; H, the home, is purged. A
// second on, X's copy is stale within its stale-while-revalidate window,
// while A's older copy is past both of its windows (A must validate it
// and may not serve it on error). The origin goes down. A client asks A
// for the page (a plain GET). Then A's own copy is removed and the client
// asks again.
//
// Expected: the climb fails; the stale copy X answered the probe with is
// served instead of the error (TestS47StaleProbeAnswerTurnsIntoAnErrorWhenTheOriginIsDown,
// staleOnFailure), as it was before cd66361 and as it is at any ingress
// that holds no copy of its own.
//
// Got: A answers 502. A's old copy makes the client's miss a
// "revalidation" (fillFrom sets FetchRequest.Revalidates whenever m.stale
// is set), and cd66361 skips staleOnFailure for every revalidation, on
// the premise that "a revalidation's own stale copy answers its failure".
// It does not here: A's copy is past its stale-if-error window
// (staleOnErrorOK false), so nothing answers the failure. The same client
// gets X's copy (200) once A holds no copy at all: holding an older copy
// makes an ingress's answer worse, and a peer's usable copy is left
// unused while the client gets an error. The failure fallback predates
// stale while climbing (S47), and Revalidates ignores the switch: with
// cluster.stale_while_climbing off the 502 is the same, so turning the
// feature off does not restore the old behaviour.
func TestS51IngressOwnOldCopyLosesThePeersStaleFallback(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run("stale_while_climbing="+strconv.FormatBool(on), func(t *testing.T) { s51OwnOldCopy(t, on) })
	}
}

func s51OwnOldCopy(t *testing.T, on bool) {
	origin := &s51ShortWindowOrigin{}
	l := newBesideLab(t, false, origin)
	l.a.c.cfg.StaleWhileClimbing = on
	p := l.pageHomedAtH("/public/s51reval")
	for i := 0; i < 4 && s49AskOnlyIfCached(l.a, p).Code != 200; i++ {
		if w := l.ask(l.a, p); w.Code != 200 {
			t.Fatalf("setup: A answered %d", w.Code)
		}
	}
	if w := s49AskOnlyIfCached(l.a, p); w.Code != 200 {
		t.Fatalf("setup: A keeps no copy of its own: %d %q", w.Code, w.Body.String())
	}
	aCopy := s49AskOnlyIfCached(l.a, p).Body.String()
	time.Sleep(4500 * time.Millisecond) // A's copy: past max-age and both windows
	newFirstHopLabOn(t, l, p, true)     // X fetches p afresh, positively indicated at A
	xCopy := s49AskOnlyIfCached(l.x, p).Body.String()
	if _, err := l.h.ph.Purge(proxy.PurgeRequest{URL: "http://site.example" + p}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // X's copy: stale, within stale-while-revalidate
	origin.down.Store(true)

	w := l.ask(l.a, p)
	t.Logf("A's own copy %q, X's copy %q; with A's old copy: A answered %d %q (Cache-Status %q); stale fallbacks served %v",
		aCopy, xCopy, w.Code, w.Body.String(), w.Result().Header.Values("Cache-Status"), l.staleFallbacks("served"))

	// Control: the same request at A once A holds no copy of its own.
	if _, err := l.a.ph.Purge(proxy.PurgeRequest{URL: "http://site.example" + p}); err != nil {
		t.Fatal(err)
	}
	w2 := l.ask(l.a, p)
	t.Logf("without A's copy: A answered %d %q (Cache-Status %q)", w2.Code, w2.Body.String(), w2.Result().Header.Values("Cache-Status"))

	if w.Code != 200 || w.Body.String() != xCopy {
		t.Errorf("origin down, X holding the page stale within its window: A (holding an older copy past its windows) answered %d %q; without its copy A answers %d %q",
			w.Code, w.Body.String(), w2.Code, w2.Body.String())
	}
}
