package origin

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestOriginFailuresAreLogged: a refused connection and a DNS failure are
// logged with the upstream and the cause, and repeats within the interval
// are counted, not logged.
func TestOriginFailuresAreLogged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	var logs bytes.Buffer
	var causes []string
	c, err := NewClient(ClientConfig{URL: "http://" + addr, ConnectTimeout: time.Second, ResponseTimeout: time.Second,
		Log: slog.New(slog.NewTextHandler(&logs, nil)), OnError: func(c string) { causes = append(causes, c) }})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		req, _ := http.NewRequest("GET", "/p/1", nil)
		if _, err := c.Fetch(context.Background(), req); err == nil {
			t.Fatal("a refused connection succeeded")
		}
	}
	out := logs.String()
	if strings.Count(out, "origin request failed") != 1 || !strings.Contains(out, "cause=refused") || !strings.Contains(out, "upstream="+addr) {
		t.Fatalf("logs:\n%s", out)
	}
	if len(causes) != 5 || causes[0] != "refused" {
		t.Fatalf("causes %v", causes)
	}

	logs.Reset()
	d, _ := NewClient(ClientConfig{URL: "http://no-such-host.invalid", ConnectTimeout: time.Second, ResponseTimeout: time.Second,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	req, _ := http.NewRequest("GET", "/", nil)
	if _, err := d.Fetch(context.Background(), req); err == nil {
		t.Fatal("an unresolvable origin succeeded")
	}
	if !strings.Contains(logs.String(), "cause=dns") {
		t.Fatalf("logs:\n%s", logs.String())
	}
}

func TestCause(t *testing.T) {
	if got := Cause(context.DeadlineExceeded); got != "timeout" {
		t.Errorf("deadline: %s", got)
	}
	if got := Cause(ErrBodyStalled); got != "stalled" {
		t.Errorf("stalled: %s", got)
	}
	if got := Cause(&net.DNSError{Err: "no such host"}); got != "dns" {
		t.Errorf("dns: %s", got)
	}
}
