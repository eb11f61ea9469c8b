// Package load is an open-loop HTTP load generator: requests leave on a
// fixed schedule whatever the server's speed (so slowness shows up as
// latency, not as a lower request rate), spread over one or more targets.
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgecache/edge/coding"
	"github.com/edgecache/edge/internal/cachestatus"
)

// Config configures a run.
type Config struct {
	Targets []string // base URLs, used round-robin (e.g. every ingress node)
	// Target, if set, is the i-th request's base URL instead: a load
	// balancer's rotation, which may change during the run (a node
	// drained for a restart).
	Target      func(i int) string
	Rate        float64       // requests per second
	Duration    time.Duration // how long to send
	MaxInflight int           // requests in flight beyond this are counted as dropped
	Timeout     time.Duration // per request
	// Host, if set, is every request's Host header: the site's name, the
	// same at every node, as browsers send it (by default each target's
	// address, which makes each node a different site to the cache key).
	Host string
	// Path returns the i-th request's path (from a Zipf sampler or a trace).
	Path func(i int, rng *rand.Rand) string
	// Progress, if set, is called about once a second with the running totals.
	Progress func(Summary)
	// Verify, if set, checks each 2xx answer (its request path, header and
	// decoded body length); a false counts the answer as wrong content.
	Verify func(path string, h http.Header, bodyLen int64) bool
	// AcceptEncoding is every request's Accept-Encoding ("": none, which a
	// cache answers in identity). The answers are read as sent, encoded,
	// and decoded only to verify them.
	AcceptEncoding string
	// NoCacheShare is the fraction of requests that carry Cache-Control:
	// no-cache and Pragma: no-cache, as a browser's hard reload does.
	NoCacheShare float64
	// Seed, if not 0, seeds the random source Path draws from, so that
	// configurations compared in one script get the same requests (0: the
	// clock, a different sequence each run).
	Seed uint64
}

// BrowserAcceptEncoding is what Chromium and Firefox send over HTTPS:
// the default of `edge load`, so that the edge compresses as it would for
// real visitors.
const BrowserAcceptEncoding = "gzip, deflate, br, zstd"

// maxErrorTimes bounds Summary.ErrorTimes: enough to place the errors of a
// fault on a timeline, never a run's worth of memory.
const maxErrorTimes = 1000

// Summary is the outcome of a run.
type Summary struct {
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`    // transport errors, truncated bodies and 5xx
	Wrong    int64 `json:"wrong"`     // 2xx answers Config.Verify refused
	MaxAgeS  int64 `json:"max_age_s"` // the largest Age of a 2xx answer: how stale it got
	// ErrorKinds counts errors by kind: transport or body (each as
	// timeout, eof, reset or other), 5xx, request.
	ErrorKinds map[string]int64 `json:"error_kinds,omitempty"`
	// ErrorTimes is when errors happened, in seconds since the start (the
	// first maxErrorTimes), so a lab can tell which fault caused them.
	ErrorTimes []float64 `json:"error_times_s,omitempty"`
	// ErrorStarts is when each of those requests was sent: a request in
	// flight during a fault that fails after it (a timeout) is the fault's.
	ErrorStarts []float64        `json:"error_starts_s,omitempty"`
	Dropped     int64            `json:"dropped"` // not sent: too many in flight
	ByResult    map[string]int64 `json:"by_result"`
	ByStatus    map[int]int64    `json:"by_status"`
	Elapsed     float64          `json:"elapsed_s"`
	// RateAch is the requests sent per second of sending (the schedule's
	// span, not the wait for the last answers after it).
	RateAch float64 `json:"rate_achieved"`
	// SenderLagMaxMs is how late the generator sent any request after
	// its scheduled time: the latencies count from the schedule (see
	// Run), so a large lag is the generator's own, on a machine it
	// shares with the server.
	SenderLagMaxMs float64 `json:"sender_lag_max_ms"`
	P50ms          float64 `json:"p50_ms"`
	P90ms          float64 `json:"p90_ms"`
	P99ms          float64 `json:"p99_ms"`
	P999ms         float64 `json:"p999_ms"`
	MaxMs          float64 `json:"max_ms"`
	HitRatio       float64 `json:"hit_ratio"` // responses whose Cache-Status says hit
	Collapsed      int64   `json:"collapsed"`
	// ByResultLatency is the latency of each result class (Result).
	ByResultLatency map[string]Latency `json:"latency_by_result"`
	// NotHit is the latency of every request the ingress did not answer
	// from its own store: misses, requests that joined another's fetch
	// (collapsed), revalidations, passes and failures. The "miss" class
	// alone leaves out the collapsed and the failed, a share that differs
	// between the configurations a script compares (a review).
	NotHit Latency `json:"latency_not_hit"`
}

// Latency summarises the latencies of one result class, in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
}

func latencyOf(ms []float64) Latency {
	n := len(ms)
	if n == 0 {
		return Latency{}
	}
	sorted := sortedCopy(ms)
	sum := 0.0
	for _, v := range sorted {
		sum += v
	}
	return Latency{Count: n, Mean: sum / float64(n), P50: quantile(sorted, 0.5), P99: quantile(sorted, 0.99)}
}

func sortedCopy(ms []float64) []float64 {
	s := slices.Clone(ms)
	slices.Sort(s)
	return s
}

// quantile is the nearest-rank p-quantile of sorted (not empty): the
// smallest value with at least p of the samples at or below it. (Until
// 2026-12-07 it took the rank above whenever p·n was whole, so the p99
// of 100 samples was their maximum: a review.)
func quantile(sorted []float64, p float64) float64 {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Result classifies a Cache-Status value by the member of the node that
// answered the client (the last): hit, collapsed, revalidated, pass, miss,
// or other.
func Result(cacheStatus string) string {
	cacheStatus = cachestatus.Last(cacheStatus)
	switch {
	case cacheStatus == "":
		return "none"
	case strings.Contains(cacheStatus, "; hit"):
		return "hit"
	case strings.Contains(cacheStatus, "collapsed"):
		return "collapsed"
	case strings.Contains(cacheStatus, "fwd=stale") && strings.Contains(cacheStatus, "304"):
		return "revalidated"
	case strings.Contains(cacheStatus, "fwd=bypass"):
		return "pass"
	case strings.Contains(cacheStatus, "fwd="):
		return "miss"
	}
	return "other"
}

// Run sends requests until the duration ends or ctx is cancelled.
//
// A request's latency runs from its scheduled send time to the end of its
// body, or to its failure: a request that times out counts with the time
// it took to fail, and a request the generator sent late (its own stall)
// counts its lateness too, so a server that stalls cannot hide behind the
// requests it kept from being sent (coordinated omission). Until
// 2026-12-07 latency ran from the actual send to the response's header
// and left failures out (a review; docs/benchmarks.md says which figures
// were taken before).
func Run(ctx context.Context, c Config) Summary {
	// DisableCompression: the client sends c.AcceptEncoding itself and
	// reads what the server sent, not a body Go decoded behind its back.
	client := &http.Client{Timeout: c.Timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0, Proxy: nil, DisableCompression: true}}
	decoder, _ := coding.NewCodec(coding.DefaultLevels) // the default levels are valid
	var (
		mu        sync.Mutex
		lat       []float64
		latBy     = map[string][]float64{}
		byResult  = map[string]int64{}
		byStatus  = map[int]int64{}
		requests  atomic.Int64
		errs      atomic.Int64
		dropped   atomic.Int64
		inflight  atomic.Int64
		wg        sync.WaitGroup
		collapsed atomic.Int64
		wrong     atomic.Int64
		maxAge    atomic.Int64
		errTimes  []float64
		errStarts []float64
		errKinds  = map[string]int64{}
		lagMax    time.Duration // the send loop's, read after it ends
		sendEnd   time.Time
	)
	interval := time.Duration(float64(time.Second) / c.Rate)
	start := time.Now()
	seed := c.Seed
	if seed == 0 {
		seed = uint64(start.UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	// snapshot copies the counts under mu and sorts outside it, so that a
	// long run's progress line holds up no request's bookkeeping (a
	// review measured 1.4 s to sort 3 million samples under the lock, on
	// the send loop).
	snapshot := func(sendSpan time.Duration) Summary {
		mu.Lock()
		latC, latByC := slices.Clone(lat), make(map[string][]float64, len(latBy))
		for k, v := range latBy {
			latByC[k] = slices.Clone(v)
		}
		byResultC, byStatusC := maps.Clone(byResult), maps.Clone(byStatus)
		wrongN, age := wrong.Load(), maxAge.Load()
		times, starts, kinds := slices.Clone(errTimes), slices.Clone(errStarts), maps.Clone(errKinds)
		mu.Unlock()
		s := summarize(requests.Load(), errs.Load(), dropped.Load(), collapsed.Load(), byResultC, byStatusC, latC, latByC, time.Since(start), sendSpan)
		s.Wrong, s.MaxAgeS = wrongN, age
		s.ErrorTimes, s.ErrorStarts, s.ErrorKinds = times, starts, kinds
		return s
	}
	// record counts one answered or failed request's latency (from due).
	record := func(res string, due time.Time, status int) {
		ms := float64(time.Since(due).Microseconds()) / 1000
		mu.Lock()
		lat = append(lat, ms)
		latBy[res] = append(latBy[res], ms)
		byResult[res]++
		byStatus[status]++
		mu.Unlock()
	}
	failed := func(sent, at time.Time, kind string) {
		errs.Add(1)
		mu.Lock()
		errKinds[kind]++
		if len(errTimes) < maxErrorTimes {
			errTimes = append(errTimes, at.Sub(start).Seconds())
			errStarts = append(errStarts, sent.Sub(start).Seconds())
		}
		mu.Unlock()
	}
	if c.Progress != nil {
		// Its own goroutine: the send loop never waits for it.
		progressDone := make(chan struct{})
		defer close(progressDone)
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-progressDone:
					return
				case <-ctx.Done():
					return
				case <-t.C:
					c.Progress(snapshot(time.Since(start)))
				}
			}
		}()
	}
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if due.Sub(start) >= c.Duration {
			break
		}
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			break
		}
		lagMax = max(lagMax, time.Since(due))
		sendEnd = time.Now()
		if c.MaxInflight > 0 && inflight.Load() >= int64(c.MaxInflight) {
			dropped.Add(1)
			continue
		}
		path := c.Path(i, rng)
		noCache := c.NoCacheShare > 0 && rng.Float64() < c.NoCacheShare
		base := ""
		if c.Target != nil {
			base = c.Target(i)
		} else {
			base = c.Targets[i%len(c.Targets)]
		}
		url := strings.TrimSuffix(base, "/") + path
		inflight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inflight.Add(-1)
			t := time.Now()
			req, err := http.NewRequest(http.MethodGet, url, nil)
			if err != nil {
				requests.Add(1)
				failed(t, time.Now(), "request")
				record("error", due, 0)
				return
			}
			if c.Host != "" {
				req.Host = c.Host
			}
			if c.AcceptEncoding != "" {
				req.Header.Set("Accept-Encoding", c.AcceptEncoding)
			}
			if noCache {
				req.Header.Set("Cache-Control", "no-cache")
				req.Header.Set("Pragma", "no-cache")
			}
			resp, err := client.Do(req)
			requests.Add(1)
			if err != nil {
				failed(t, time.Now(), errKind("transport", err))
				record("error", due, 0)
				return
			}
			n, err := readBody(resp, c.Verify != nil, decoder)
			resp.Body.Close()
			res := Result(resp.Header.Get("Cache-Status"))
			switch {
			case err != nil: // a cut body is an error too
				failed(t, time.Now(), errKind("body", err))
			case resp.StatusCode >= 500:
				failed(t, time.Now(), "5xx")
			case c.Verify != nil && resp.StatusCode < 300 && !c.Verify(path, resp.Header, n):
				wrong.Add(1)
			}
			if age, err := strconv.ParseInt(resp.Header.Get("Age"), 10, 64); err == nil && resp.StatusCode < 300 {
				for cur := maxAge.Load(); age > cur && !maxAge.CompareAndSwap(cur, age); cur = maxAge.Load() {
				}
			}
			if res == "collapsed" {
				collapsed.Add(1)
			}
			record(res, due, resp.StatusCode)
		}()
	}
	sendSpan := sendEnd.Sub(start) + interval // the last request's slot included
	if sendEnd.IsZero() {
		sendSpan = 0
	}
	wg.Wait()
	sum := snapshot(sendSpan)
	sum.SenderLagMaxMs = float64(lagMax.Microseconds()) / 1000
	return sum
}

func summarize(req, errs, dropped, collapsed int64, byResult map[string]int64, byStatus map[int]int64, lat []float64, latBy map[string][]float64, el, sendSpan time.Duration) Summary {
	s := Summary{Requests: req, Errors: errs, Dropped: dropped, Collapsed: collapsed, ByResult: map[string]int64{}, ByStatus: map[int]int64{}, Elapsed: el.Seconds(),
		ByResultLatency: map[string]Latency{}}
	var notHit []float64
	for k, v := range latBy {
		s.ByResultLatency[k] = latencyOf(v)
		if k != "hit" {
			notHit = append(notHit, v...)
		}
	}
	s.NotHit = latencyOf(notHit)
	for k, v := range byResult {
		s.ByResult[k] = v
	}
	for k, v := range byStatus {
		s.ByStatus[k] = v
	}
	if sendSpan > 0 {
		s.RateAch = float64(req) / sendSpan.Seconds()
	}
	if n := len(lat); n > 0 {
		sorted := sortedCopy(lat)
		s.P50ms, s.P90ms, s.P99ms, s.P999ms, s.MaxMs = quantile(sorted, 0.5), quantile(sorted, 0.9), quantile(sorted, 0.99), quantile(sorted, 0.999), sorted[n-1]
	}
	if req > 0 {
		s.HitRatio = float64(byResult["hit"]) / float64(req)
	}
	return s
}

// readBody reads resp's body to its end and returns its length: decoded
// when decode is set (to verify it), else as sent. A body in a coding it
// cannot decode is an error ("body").
func readBody(resp *http.Response, decode bool, codec *coding.Codec) (int64, error) {
	if !decode {
		return io.Copy(io.Discard, resp.Body)
	}
	enc, ok := coding.OfBody(resp.Header.Values("Content-Encoding"))
	if !ok {
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, errUnknownCoding
	}
	if enc == coding.Identity {
		return io.Copy(io.Discard, resp.Body)
	}
	dec, err := codec.NewReader(enc, resp.Body, 1<<30)
	if err != nil {
		return 0, err
	}
	defer dec.Close()
	return io.Copy(io.Discard, dec)
}

var errUnknownCoding = errors.New("load: a body in a coding this client does not decode")

// errKind names an error for Summary.ErrorKinds (a bounded set).
func errKind(where string, err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return where + " timeout"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return where + " eof"
	case errors.Is(err, syscall.ECONNRESET):
		return where + " reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return where + " refused"
	}
	return where + " other"
}

// Line is the one-line live progress display.
func Line(s Summary) string {
	return fmt.Sprintf("\r%6.1fs  %8d req  %7.0f req/s  %5d err  hit %5.1f%%  p50 %6.2f ms  p99 %7.2f ms ",
		s.Elapsed, s.Requests, s.RateAch, s.Errors, 100*s.HitRatio, s.P50ms, s.P99ms)
}
