package proxy

// Hostile review s37: closingWriter only wraps a *slowBody, which exists
// only while limits.body_timeout is on. With it off (BodyTimeout 0) an
// origin's early answer to an upload must still never leave the rest of
// the body to be parsed as requests.

import (
	"fmt"
	"testing"
)

func TestS37EarlyAnswerWithBodyTimeoutOff(t *testing.T) {
	f := newS36Front(t, func(c *Config) { c.BodyTimeout = 0; c.RequestBuffering = false })
	var bad []string
	runs := 0
	for _, useTLS := range []bool{false, true} {
		for _, path := range []string{"/403", "/big403", "/302"} {
			for _, size := range []int{64 << 10, 256<<10 + 1, 1 << 20} {
				for _, pipeline := range []bool{false, true} {
					runs++
					p := s36Probe{addr: f.addr(useTLS), tls: useTLS, pipeline: pipeline,
						head: fmt.Sprintf("POST %s HTTP/1.1\r\nHost: example.test\r\nContent-Length: %d\r\n\r\n", path, size),
						body: s36Body(size)}
					if r := p.run(t); r.problem != "" {
						bad = append(bad, fmt.Sprintf("tls %v %s %d pipeline %v: %d closed %v: %s", useTLS, path, size, pipeline, r.status, r.closed, r.problem))
					}
				}
			}
		}
	}
	if len(bad) > 0 || f.origin.smuggled.Load() > 0 {
		t.Errorf("%d of %d probes went wrong, %d requests from bodies reached the origin: %v", len(bad), runs, f.origin.smuggled.Load(), bad)
	}
	expectNothingHeld(t, f.h, "uploads")
}
