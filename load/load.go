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
	RateAch     float64          `json:"rate_achieved"`
	P50ms       float64          `json:"p50_ms"`
	P90ms       float64          `json:"p90_ms"`
	P99ms       float64          `json:"p99_ms"`
	P999ms      float64          `json:"p999_ms"`
	MaxMs       float64          `json:"max_ms"`
	HitRatio    float64          `json:"hit_ratio"` // responses whose Cache-Status says hit
	Collapsed   int64            `json:"collapsed"`
	// ByResultLatency is the latency of each result class (Result): a
	// "miss" is every request the ingress did not answer from its own store.
	ByResultLatency map[string]Latency `json:"latency_by_result"`
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

// quantile is the p-quantile of sorted (not empty), by rank.
func quantile(sorted []float64, p float64) float64 {
	return sorted[min(int(p*float64(len(sorted))), len(sorted)-1)]
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
	)
	interval := time.Duration(float64(time.Second) / c.Rate)
	start := time.Now()
	rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), 99))
	snapshot := func() Summary {
		mu.Lock()
		defer mu.Unlock()
		s := summarize(requests.Load(), errs.Load(), dropped.Load(), collapsed.Load(), byResult, byStatus, lat, latBy, time.Since(start))
		s.Wrong = wrong.Load()
		s.MaxAgeS = maxAge.Load()
		s.ErrorTimes = slices.Clone(errTimes)
		s.ErrorStarts = slices.Clone(errStarts)
		s.ErrorKinds = maps.Clone(errKinds)
		return s
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
	lastProgress := start
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
		if c.Progress != nil && time.Since(lastProgress) >= time.Second {
			lastProgress = time.Now()
			c.Progress(snapshot())
		}
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
			ms := float64(time.Since(t).Microseconds()) / 1000
			requests.Add(1)
			if err != nil {
				failed(t, time.Now(), errKind("transport", err))
				mu.Lock()
				byStatus[0]++
				mu.Unlock()
				return
			}
			n, err := readBody(resp, c.Verify != nil, decoder)
			resp.Body.Close()
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
			res := Result(resp.Header.Get("Cache-Status"))
			if res == "collapsed" {
				collapsed.Add(1)
			}
			mu.Lock()
			lat = append(lat, ms)
			latBy[res] = append(latBy[res], ms)
			byResult[res]++
			byStatus[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return snapshot()
}

func summarize(req, errs, dropped, collapsed int64, byResult map[string]int64, byStatus map[int]int64, lat []float64, latBy map[string][]float64, el time.Duration) Summary {
	s := Summary{Requests: req, Errors: errs, Dropped: dropped, Collapsed: collapsed, ByResult: map[string]int64{}, ByStatus: map[int]int64{}, Elapsed: el.Seconds(),
		ByResultLatency: map[string]Latency{}}
	for k, v := range latBy {
		s.ByResultLatency[k] = latencyOf(v)
	}
	for k, v := range byResult {
		s.ByResult[k] = v
	}
	for k, v := range byStatus {
		s.ByStatus[k] = v
	}
	if el > 0 {
		s.RateAch = float64(req) / el.Seconds()
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
