package proxy

import (
	"math"
	"testing"
	"time"
)

func TestParseWaitOrderRefusesMalformed(t *testing.T) {
	for _, s := range []string{
		"", ".", "1.", ".1", "1", "x.1", "1.x", "1.2.3", " 1.2", "1.2 ", "1.-2",
		"1.11111111111111111", // 17 hex digits
		"99999999999999999999.1", "1.0x1", "+.1",
	} {
		if o, ok := ParseWaitOrder(s); ok {
			t.Errorf("ParseWaitOrder(%q) = %v, want refused", s, o)
		}
	}
	for _, c := range []struct {
		s    string
		want WaitOrder
	}{
		{"0.0", WaitOrder{}},
		{"1733300000000000000.ff", WaitOrder{At: 1733300000000000000, Tie: 255}},
		{"-5.1", WaitOrder{At: -5, Tie: 1}},
		{"9223372036854775807.ffffffffffffffff", WaitOrder{At: math.MaxInt64, Tie: math.MaxUint64}},
	} {
		if o, ok := ParseWaitOrder(c.s); !ok || o != c.want {
			t.Errorf("ParseWaitOrder(%q) = %v, %v; want %v", c.s, o, ok, c.want)
		}
	}
}

// FuzzWaitOrder: whatever a peer sends, a parsed order prints back to
// itself, and Before is a strict order on what parses.
func FuzzWaitOrder(f *testing.F) {
	f.Add("1733300000000000000.ff", "1733300000000000000.fe")
	f.Add("0.0", "-1.1")
	f.Add("1.2.3", "")
	f.Fuzz(func(t *testing.T, a, b string) {
		oa, okA := ParseWaitOrder(a)
		ob, okB := ParseWaitOrder(b)
		if okA {
			if back, ok := ParseWaitOrder(oa.String()); !ok || back != oa {
				t.Fatalf("%q parsed to %v, which prints %q and reads back %v, %v", a, oa, oa.String(), back, ok)
			}
			if oa.Before(oa) {
				t.Fatalf("%v before itself", oa)
			}
		}
		if okA && okB && oa != ob && oa.Before(ob) == ob.Before(oa) {
			t.Fatalf("%v and %v: not exactly one before the other", oa, ob)
		}
	})
}

func TestNewWaitOrderIsNeverZero(t *testing.T) {
	for range 1000 {
		if NewWaitOrder(time.Unix(0, 0)).IsZero() {
			t.Fatal("a new order is the zero order, which reads as none sent")
		}
	}
}

// TestJoinRuleNeverClosesACycle checks the rule's argument on its own: a
// climb joins a fill whose header is in, a direct fill or an older fill,
// and nothing else; a client joins anything.
func TestJoinRuleNeverClosesACycle(t *testing.T) {
	older, younger := WaitOrder{At: 1, Tie: 1}, WaitOrder{At: 2, Tie: 1}
	fillAt := func(w fillWait, headerIn bool) *fill {
		f := newFill(0, w)
		if headerIn {
			f.publish(nil, false, nil)
		}
		return f
	}
	for _, c := range []struct {
		name  string
		f     *fill
		req   fillWait
		joins bool
	}{
		{"client, any fill", fillAt(fillWait{order: younger}, false), fillWait{order: older}, true},
		{"climb, older fill", fillAt(fillWait{order: older}, false), fillWait{order: younger, climb: true}, true},
		{"climb, younger fill", fillAt(fillWait{order: younger}, false), fillWait{order: older, climb: true}, false},
		{"climb, its own order", fillAt(fillWait{order: older}, false), fillWait{order: older, climb: true}, false},
		{"climb, younger but direct fill", fillAt(fillWait{order: younger, direct: true}, false), fillWait{order: older, climb: true}, true},
		{"climb, younger fill with its header in", fillAt(fillWait{order: younger}, true), fillWait{order: older, climb: true}, true},
		{"climb without an order, any fill waiting", fillAt(fillWait{order: older}, false), fillWait{climb: true}, false},
	} {
		if got := c.f.joinableBy(c.req); got != c.joins {
			t.Errorf("%s: joinable %v, want %v", c.name, got, c.joins)
		}
	}
}

// TestFlightsKeepTheWaitOrder: a slice flight under way is shared by a
// client and by a younger climb, and a climb older than the flight (or a
// flight that is direct) is placed as the join rule says; one that may
// not share it runs its own fetch at once.
func TestFlightsKeepTheWaitOrder(t *testing.T) {
	older, younger := WaitOrder{At: 1, Tie: 1}, WaitOrder{At: 2, Tie: 1}
	var g flights
	release := make(chan struct{})
	started := make(chan struct{})
	leaderDone := make(chan any)
	go func() {
		v, _, _, _ := g.do("k", fillWait{order: younger}, 0, func() (any, error) {
			close(started)
			<-release
			return "leader's", nil
		})
		leaderDone <- v
	}()
	<-started
	// An older climb may not wait on the younger flight: it runs apart,
	// while the leader is still blocked.
	v, shared, apart, err := g.do("k", fillWait{order: older, climb: true}, 0, func() (any, error) { return "own", nil })
	if v != "own" || err != nil || shared || !apart {
		t.Fatalf("older climb: %v, %v, shared %v, apart %v; want its own fetch, apart", v, err, shared, apart)
	}
	joined := make(chan any, 2)
	for _, w := range []fillWait{{order: older}, {order: WaitOrder{At: 3, Tie: 1}, climb: true}} {
		go func() {
			v, shared, apart, _ := g.do("k", w, 0, func() (any, error) { return "should not run", nil })
			if !shared || apart {
				v = "not shared"
			}
			joined <- v
		}()
	}
	for waiting := 0; waiting < 2; time.Sleep(time.Millisecond) { // both on the flight before it ends
		g.mu.Lock()
		waiting = g.m["k"].waiters
		g.mu.Unlock()
	}
	close(release)
	if v := <-leaderDone; v != "leader's" {
		t.Fatalf("leader: %v", v)
	}
	for range 2 {
		if v := <-joined; v != "leader's" {
			t.Errorf("a client or a younger climb got %v, want the flight's result", v)
		}
	}
}
