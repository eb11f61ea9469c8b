package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/internal/cachestatus"
	"github.com/edgecache/edge/proxy"
)

// The access log (log.access: off, stdout or a file; log.access_format:
// json or combined). A request hands its line to a buffered channel and
// never waits: a writer goroutine formats and writes in batches. A full
// channel (the disk cannot keep up) drops the line and counts it; a write
// error (a full disk, an unwritable file) is counted and logged at most
// once a minute. SIGUSR1 reopens the file, after logrotate renamed it.

type accessLog struct {
	path    string // "" for stdout
	json    bool
	ch      chan accessEntry
	reopen  chan struct{}
	log     *slog.Logger
	lines   prometheus.Counter
	dropped prometheus.Counter
	errs    prometheus.Counter
	done    chan struct{}
}

// accessEntry is one request.
type accessEntry struct {
	Time         time.Time
	Client       string
	Site         string
	Method       string
	Host         string
	URI          string
	Proto        string
	Status       int
	Bytes        int64
	Duration     time.Duration
	CacheStatus  string
	Upstream     string
	UpstreamAddr string // the origin (URL) or peer that answered
	Retries      int    // upstreams tried before the one that answered
	UpstreamDur  time.Duration
	Referer      string
	UserAgent    string
}

// accessQueue is how many lines may wait for the writer; beyond it lines
// are dropped rather than slow requests down.
const accessQueue = 8192

func newAccessLog(where, format string, log *slog.Logger, reg prometheus.Registerer) (*accessLog, error) {
	a := &accessLog{json: format != "combined", ch: make(chan accessEntry, accessQueue), reopen: make(chan struct{}, 1), log: log, done: make(chan struct{}),
		lines:   prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_access_log_lines_total", Help: "Access log lines written."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_access_log_dropped_total", Help: "Access log lines dropped because the writer could not keep up."}),
		errs:    prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_access_log_errors_total", Help: "Access log writes or reopens that failed (a full disk, an unwritable file)."}),
	}
	if where != "stdout" {
		a.path = where
		f, err := os.OpenFile(where, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("log.access: %w", err)
		}
		_ = f.Close()
	}
	reg.MustRegister(a.lines, a.dropped, a.errs)
	return a, nil
}

// add queues a line without waiting.
func (a *accessLog) add(e accessEntry) {
	select {
	case a.ch <- e:
	default:
		a.dropped.Inc()
	}
}

// Reopen makes the writer reopen the file (SIGUSR1).
func (a *accessLog) Reopen() {
	select {
	case a.reopen <- struct{}{}:
	default:
	}
}

// run writes lines until ctx ends, then drains what is queued.
func (a *accessLog) run(ctx context.Context) {
	defer close(a.done)
	var f *os.File
	open := func() io.Writer {
		if a.path == "" {
			return os.Stdout
		}
		if f != nil {
			_ = f.Close()
		}
		var err error
		if f, err = os.OpenFile(a.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			a.errs.Inc()
			a.log.Error("access log: cannot open", "path", a.path, "err", err)
			f = nil
			return io.Discard
		}
		return f
	}
	dst := open()
	out := bufio.NewWriterSize(dst, 64<<10)
	var lastErr time.Time
	var buf []byte
	write := func(e accessEntry) {
		buf = a.format(buf[:0], e)
		if _, err := out.Write(buf); err != nil {
			a.failed(err, &lastErr)
			return
		}
		a.lines.Inc()
	}
	flush := func() {
		if err := out.Flush(); err != nil {
			a.failed(err, &lastErr)
			out.Reset(dst) // drop the unwritable bytes; later lines may succeed
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case e := <-a.ch:
			write(e)
			if len(a.ch) == 0 {
				flush()
			}
		case <-a.reopen:
			flush()
			dst = open()
			out.Reset(dst)
		case <-tick.C:
			flush()
		case <-ctx.Done():
			for {
				select {
				case e := <-a.ch:
					write(e)
				default:
					flush()
					if f != nil {
						_ = f.Close()
					}
					return
				}
			}
		}
	}
}

func (a *accessLog) failed(err error, last *time.Time) {
	a.errs.Inc()
	if time.Since(*last) > time.Minute {
		*last = time.Now()
		a.log.Error("access log: write failed; requests go on, lines are lost", "path", a.path, "err", err)
	}
}

// format appends one line.
func (a *accessLog) format(b []byte, e accessEntry) []byte {
	if a.json {
		line, _ := json.Marshal(struct {
			Time        string  `json:"time"`
			Client      string  `json:"client"`
			Site        string  `json:"site"`
			Method      string  `json:"method"`
			URL         string  `json:"url"`
			Proto       string  `json:"proto"`
			Status      int     `json:"status"`
			Bytes       int64   `json:"bytes"`
			DurationMs  float64 `json:"duration_ms"`
			Cache       string  `json:"cache"`
			Upstream    string  `json:"upstream,omitempty"`
			UpstreamAt  string  `json:"upstream_addr,omitempty"`
			Retries     int     `json:"retries,omitempty"`
			UpstreamMs  float64 `json:"upstream_ms,omitempty"`
			UserAgent   string  `json:"user_agent,omitempty"`
			Referer     string  `json:"referer,omitempty"`
			CacheStatus string  `json:"cache_status,omitempty"`
		}{e.Time.UTC().Format(time.RFC3339Nano), e.Client, e.Site, e.Method, e.Host + originForm(e.URI), e.Proto, e.Status, e.Bytes,
			float64(e.Duration.Microseconds()) / 1000, cacheResult(e.CacheStatus), e.Upstream, e.UpstreamAddr, e.Retries, float64(e.UpstreamDur.Microseconds()) / 1000,
			e.UserAgent, e.Referer, e.CacheStatus})
		return append(append(b, line...), '\n')
	}
	// Apache/nginx "combined", then the site, the cache result, the
	// duration in ms, the Host, the upstream that answered and the retries
	// ("-" for what there is none of), so that one grep finds a request.
	b = append(b, e.Client...)
	b = append(b, " - - ["...)
	b = e.Time.AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
	b = append(b, "] \""...)
	b = appendEscaped(b, e.Method)
	b = append(b, ' ')
	b = appendEscaped(b, e.URI)
	b = append(b, ' ')
	b = appendEscaped(b, e.Proto)
	b = append(b, "\" "...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.Bytes, 10)
	b = append(b, " \""...)
	b = appendEscapedOrDash(b, e.Referer)
	b = append(b, "\" \""...)
	b = appendEscapedOrDash(b, e.UserAgent)
	b = append(b, "\" "...)
	b = append(b, e.Site+" "+cacheResult(e.CacheStatus)+" "...)
	b = strconv.AppendFloat(b, float64(e.Duration.Microseconds())/1000, 'f', 3, 64)
	b = append(b, ' ')
	b = appendEscapedOrDash(b, e.Host)
	b = append(b, ' ')
	b = appendEscapedOrDash(b, e.UpstreamAddr)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(e.Retries), 10)
	return append(b, '\n')
}

// appendEscaped appends s as nginx's log_format escape=default writes a
// variable: '"', '\\', control bytes and bytes above 0x7e as \xHH, so that
// no field can end its quotes early, forge the fields after it, or put raw
// bytes in the file.
func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' || c < 0x20 || c > 0x7e {
			b = append(b, '\\', 'x', hex[c>>4], hex[c&0xf])
			continue
		}
		b = append(b, c)
	}
	return b
}

// appendEscapedOrDash is appendEscaped, with "-" for an empty value (as
// nginx writes an absent Referer or User-Agent).
func appendEscapedOrDash(b []byte, s string) []byte {
	if s == "" {
		return append(b, '-')
	}
	return appendEscaped(b, s)
}

// cacheResult shortens a Cache-Status to what the cache did: hit, stale,
// miss, collapsed, bypass, error… ("-" without one).
func cacheResult(cs string) string {
	_, params, ok := strings.Cut(cachestatus.Last(cs), "; ")
	if !ok {
		return "-"
	}
	switch {
	case strings.HasPrefix(params, "hit"):
		if strings.Contains(params, "stale") {
			return "stale"
		}
		return "hit"
	case strings.Contains(params, "collapsed"):
		return "collapsed"
	case strings.Contains(params, "fwd=bypass"):
		return "pass"
	case strings.Contains(params, "fwd=stale"):
		return "revalidated"
	case strings.Contains(params, "fwd="):
		return "miss"
	}
	return "-"
}

// accessWriter records what a handler sent.
type accessWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *accessWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *accessWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (deadlines, flushes).
func (w *accessWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logged answers r with serve and logs the answer; serve fills info with
// who answered a miss.
func (a *accessLog) logged(site string, r *http.Request, w http.ResponseWriter, serve func(http.ResponseWriter, *http.Request, *proxy.UpstreamInfo)) {
	start := time.Now()
	info := &proxy.UpstreamInfo{}
	aw := &accessWriter{ResponseWriter: w}
	defer func() {
		if aw.status == 0 {
			aw.status = http.StatusOK
		}
		a.add(accessEntry{Time: start, Client: clientAddr(r.RemoteAddr), Site: site, Method: r.Method, Host: r.Host, URI: r.RequestURI,
			Proto: r.Proto, Status: aw.status, Bytes: aw.bytes, Duration: time.Since(start), CacheStatus: aw.Header().Get("Cache-Status"),
			Upstream: info.From(), UpstreamAddr: info.Addr(), Retries: info.Retries(), UpstreamDur: info.Duration(), Referer: r.Header.Get("Referer"), UserAgent: r.Header.Get("User-Agent")})
	}()
	serve(aw, r, info)
}

func clientAddr(remote string) string {
	if i := strings.LastIndexByte(remote, ':'); i > 0 {
		return strings.Trim(remote[:i], "[]")
	}
	return remote
}

// ReopenAccessLog reopens the access log file (SIGUSR1).
func (n *Node) ReopenAccessLog() {
	if n.access == nil {
		n.log.Info("SIGUSR1: no access log to reopen (log.access is off)")
		return
	}
	n.log.Info("SIGUSR1: reopening the access log", "path", n.cfg.Log.Access)
	n.access.Reopen()
}

// originForm is a request target as its path and query: an absolute-form
// target ("http://blog.test/y", which proxies send) loses its scheme and
// authority, so that the JSON log's url (Host, then this) is one URL, not
// "blog.testhttp://…@blog.test/y" with a host the client chose (a
// review's TestS66AccessJSONURLOfAnAbsoluteFormRequest). The combined
// format keeps the request line as sent, as nginx's does.
func originForm(target string) string {
	if target == "" || target[0] == '/' || target == "*" {
		return target
	}
	_, rest, ok := strings.Cut(target, "://")
	if !ok {
		return target // authority-form (CONNECT): nothing to strip
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		if rest[i] == '?' {
			return "/" + rest[i:]
		}
		return rest[i:]
	}
	return "/"
}
