package origin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
)

// EarlyHints receives the fields of a 103 (Early Hints, RFC 8297) the
// origin sends before its final answer to one fetch. It runs on the
// transport's goroutine while the fetch waits for that answer, so it must
// not block for long and must hand nothing to another request: the hints
// are the origin's answer to this request alone.
type EarlyHints func(fields http.Header)

type earlyHintsKey struct{}

// WithEarlyHints returns ctx asking Client.Fetch to pass the origin's 103
// answers to hints. Without it they are read and dropped, as net/http's
// client always did: a fetch made for no client (a background refresh, a
// slice) has nobody to give them to.
func WithEarlyHints(ctx context.Context, hints EarlyHints) context.Context {
	return context.WithValue(ctx, earlyHintsKey{}, hints)
}

// withHintTrace hooks the transport's 1xx answers to the EarlyHints ctx
// carries, if any. Other 1xx codes (100 Continue, 102) are the
// connection's business and stay with the transport.
func withHintTrace(ctx context.Context) context.Context {
	hints, _ := ctx.Value(earlyHintsKey{}).(EarlyHints)
	if hints == nil {
		return ctx
	}
	n := 0 // the transport calls it from one goroutine, in order
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(code int, fields textproto.MIMEHeader) error {
			if n++; n > max1xx {
				return errTooMany1xx
			}
			if code == http.StatusEarlyHints {
				hints(http.Header(fields))
			}
			return nil
		},
	})
}

// max1xx bounds the informational answers read before the final one. With
// a Got1xxResponse hook net/http's transport reads any number (each within
// the header size limit), so an origin could keep a fetch reading 103s
// until origin.response_timeout; without the hook the size limit covered
// them all.
const max1xx = 16

var errTooMany1xx = errors.New("more than 16 informational (1xx) answers before the final one")
