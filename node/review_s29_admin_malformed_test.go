package node

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestS29AdminMalformedInputNeverCrashesOrWedges: garbage at every admin
// endpoint, from an outsider and from the token holder (bad escapes,
// control bytes, URLs that are not URLs, a 1 MB body on a purge, a
// cluster key body over its bound, a refresh that overflows, a client
// that sends half a head and stops), answers a 4xx (or the page) and
// never a 5xx from a panic; the node keeps serving its admin API, and a
// half-sent head does not hold the answers of others.
func TestS29AdminMalformedInputNeverCrashesOrWedges(t *testing.T) {
	a, _ := adminReviewCluster(t)
	adm := a.AdminAddr()
	tok := "Authorization: Bearer admin-token-0123456789\r\n"
	// A slow client: half a head, then nothing, held open during the rest.
	slow, err := net.Dial("tcp", adm)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_, _ = slow.Write([]byte("POST /purge?url=http://x/ HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n"))
	big := strings.Repeat("z", 1<<20)
	for _, c := range []struct {
		head, body string
		want       func(int) bool
	}{
		{"GET /status?url=%zz&refresh=99999999999999999999999 HTTP/1.1\r\nHost: x\r\n" + tok, "", ok2xx},
		{"GET /status?url=http://[::1&login=1 HTTP/1.1\r\nHost: x\r\n" + tok, "", ok2xx},
		{"GET /status?url=%00%0d%0a HTTP/1.1\r\nHost: x\r\n" + tok, "", ok2xx},
		{"GET /status/route.json?url=ftp://shop.test/%ff%fe HTTP/1.1\r\nHost: x\r\n" + tok, "", ok2xx},
		{"GET /status/route.json?url=http://shop.test:99999/../../ HTTP/1.1\r\nHost: x\r\n" + tok, "", ok2xx},
		{"GET /status/route.json?url=:::: HTTP/1.1\r\nHost: x\r\n" + tok, "", ok2xx},
		{"GET /status/route.json?url=http://" + strings.Repeat("a.", 2000) + "test/ HTTP/1.1\r\nHost: x\r\n", "", is4xx},
		{"POST /purge?url=%zz HTTP/1.1\r\nHost: x\r\n" + tok, "", is4xx},
		{"POST /purge?url=http://shop.test:x/ HTTP/1.1\r\nHost: x\r\n" + tok, "", is4xx},
		{"POST /purge?url=javascript:alert(1) HTTP/1.1\r\nHost: x\r\n" + tok, "", is4xx},
		{"POST /purge?prefix=http://[::1/ HTTP/1.1\r\nHost: x\r\n" + tok, "", is4xx},
		{"POST /purge?tag=%00 HTTP/1.1\r\nHost: x\r\n" + tok, "", ok2xx},
		{"POST /purge?soft=%ff&url=http://shop.test/ HTTP/1.1\r\nHost: x\r\n" + tok, "", is4xx},
		{"POST /purge?url=http://shop.test/big HTTP/1.1\r\nHost: x\r\n" + tok + "Content-Type: application/json\r\n", big, ok2xx},
		{"POST /purge?url=http://shop.test/big HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n", big, is4xx},
		{"POST /cluster/keys?op=install HTTP/1.1\r\nHost: x\r\n" + tok, strings.Repeat("k", 5000), is4xx},
		{"POST /cluster/keys?op=%ff HTTP/1.1\r\nHost: x\r\n" + tok, "short", is4xx},
		{"POST /cluster/keys?op=remove HTTP/1.1\r\nHost: x\r\n" + tok, "a-test-cluster-secret", is4xx}, // the last key
		{"POST /reload HTTP/1.1\r\nHost: x\r\n" + tok, "{not json", is4xx},                             // no loader: refused
	} {
		line, _, _ := strings.Cut(c.head, "\r\n")
		resp, body := rawAsk(t, adm, c.head+"Content-Length: "+itoa(len(c.body))+"\r\nConnection: close\r\n\r\n"+c.body)
		if !c.want(resp.StatusCode) {
			t.Errorf("%.120q: %d %.200q", line, resp.StatusCode, body)
		}
	}
	// Still serving, and still the same membership key.
	done := make(chan struct{})
	go func() {
		defer close(done)
		if code, body := getBody(t, "http://"+adm+"/healthz"); code != 200 {
			t.Errorf("healthz after the garbage: %d %q", code, body)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the admin listener stopped answering")
	}
	resp, body := rawAsk(t, adm, "GET /cluster/keys HTTP/1.1\r\nHost: x\r\n"+tok+"Connection: close\r\n\r\n")
	if resp.StatusCode != 200 || strings.Count(body, "fingerprint") != 1 {
		t.Errorf("membership keys after the garbage: %d %s", resp.StatusCode, body)
	}
}

func ok2xx(c int) bool { return c >= 200 && c < 300 }
func is4xx(c int) bool { return c >= 400 && c < 500 }
