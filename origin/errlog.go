package origin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Cause classifies an upstream failure for logs and metrics; the set is
// fixed so that a metric label on it stays bounded.
func Cause(err error) string {
	var dnsErr *net.DNSError
	var op *net.OpError
	var ne net.Error
	switch {
	case errors.As(err, &dnsErr):
		return "dns"
	case errors.Is(err, ErrBodyStalled), errors.Is(err, ErrSendStalled):
		return "stalled"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "reset"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &op) && op.Op == "dial":
		return "connect"
	}
	return "other"
}

// errorLog logs upstream failures, at most one line per cause per
// interval; the lines in between are counted and reported with the next.
type errorLog struct {
	log      *slog.Logger
	interval time.Duration
	mu       sync.Mutex
	last     map[string]time.Time
	dropped  map[string]int
}

func newErrorLog(log *slog.Logger, interval time.Duration) *errorLog {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &errorLog{log: log, interval: interval, last: map[string]time.Time{}, dropped: map[string]int{}}
}

// report logs err (rate-limited) and returns its cause.
func (l *errorLog) report(upstream, method, path string, err error) string {
	cause := Cause(err)
	if cause == "canceled" {
		return cause // the client left: not an origin failure
	}
	now := time.Now()
	l.mu.Lock()
	if now.Sub(l.last[cause]) < l.interval {
		l.dropped[cause]++
		l.mu.Unlock()
		return cause
	}
	l.last[cause] = now
	suppressed := l.dropped[cause]
	l.dropped[cause] = 0
	l.mu.Unlock()
	l.log.Warn("origin request failed", "upstream", upstream, "method", method, "path", path, "cause", cause, "err", err, "suppressed", suppressed)
	return cause
}
