// Package reject is the one error type of edge's wire parsers (heartbeat
// packets, indicator advertisements): every refusal carries a reason from
// a short, fixed list, so that each reason can have its own counter with a
// bounded label set, and a detail for logs.
package reject

import (
	"errors"
	"fmt"
)

// Reason names why input was refused.
type Reason string

// Error is a refused input.
type Error struct {
	What   string // what was refused, e.g. "heartbeat"
	Reason Reason
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return e.What + " rejected: " + string(e.Reason)
	}
	return e.What + " rejected (" + string(e.Reason) + "): " + e.Detail
}

// New returns an Error; format and args make the detail (may be empty).
func New(what string, r Reason, format string, args ...any) error {
	e := &Error{What: what, Reason: r}
	if format != "" {
		e.Detail = fmt.Sprintf(format, args...)
	}
	return e
}

// ReasonOf returns the reason of an Error anywhere in err's chain.
func ReasonOf(err error) (Reason, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason, true
	}
	return "", false
}
