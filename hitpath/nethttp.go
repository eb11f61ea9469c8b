package hitpath

import (
	"net/http"
	"time"
)

// What the loop relies on in net/http beyond its documented API, in one
// place. TestNetHTTPBehavioursTheLoopReliesOn (nethttp_test.go) checks
// each against the Go release in use and fails when one changes; go.mod
// pins the toolchain so that a change arrives with a deliberate upgrade.
//
//  1. While a handler runs, net/http reads the connection in the
//     background (to notice a client that leaves), and ends that read,
//     when the handler returns, with a read deadline long in the past
//     (time.Unix(1, 0): abortPendingRead). The loop holds such a read
//     (hold) and must return when net/http ends it: isNetHTTPAbort.
//  2. After answering a request on a connection it keeps, net/http reports
//     the connection idle (ConnState StateIdle) before it reads again:
//     answeredState, where the loop takes the connection back.
//  3. net/http calls Read again only from one goroutine at a time (its
//     connection goroutine, or the background read), so a Conn's read
//     state needs no lock.

// abortBefore: a read deadline before it is net/http ending a read.
var abortBefore = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// isNetHTTPAbort reports whether a read deadline is net/http ending its
// background read (1). Another past deadline (an http.Server ReadTimeout,
// which this listener refuses: see NewListener) is not taken for it.
func isNetHTTPAbort(t time.Time) bool { return !t.IsZero() && t.Before(abortBefore) }

// answeredState is the ConnState net/http reports once it has answered a
// request on a connection it keeps (2).
const answeredState = http.StateIdle
