package node

import (
	"strings"
	"testing"
	"time"
)

// TestCombinedLogCannotBeForged: method, URI, protocol, referer and user
// agent are escaped as nginx's escape=default escapes them, so a quote in
// a URI (HTTP/1.1) or spaces and quotes in an HTTP/2 :path cannot end the
// request field early and forge the status, bytes, referer or user agent,
// and no raw byte above 0x7e or below 0x20 reaches the file.
func TestCombinedLogCannotBeForged(t *testing.T) {
	a := &accessLog{json: false}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		e    accessEntry
		want string
	}{
		{accessEntry{Time: at, Client: "192.0.2.1", Site: "s", Method: "GET", URI: `/a" 200 1 "-" "forged`, Proto: "HTTP/1.1", Status: 404, Bytes: 5},
			`192.0.2.1 - - [01/Dec/2026:10:00:00 +0000] "GET /a\x22 200 1 \x22-\x22 \x22forged HTTP/1.1" 404 5 "-" "-" s - 0.000 - - 0` + "\n"},
		{accessEntry{Time: at, Client: "192.0.2.1", Site: "s", Method: "GET", URI: "/h2 path \" 200 9", Proto: "HTTP/2.0", Status: 200, Bytes: 1,
			Referer: "http://r/\x9b\\", UserAgent: "ua\n\"x"},
			`192.0.2.1 - - [01/Dec/2026:10:00:00 +0000] "GET /h2 path \x22 200 9 HTTP/2.0" 200 1 "http://r/\x9B\x5C" "ua\x0A\x22x" s - 0.000 - - 0` + "\n"},
		{accessEntry{Time: at, Client: "192.0.2.1", Site: "s", Method: "GET", URI: "/x", Proto: "HTTP/1.1", Status: 200, Bytes: 3,
			Host: "shop.test", UpstreamAddr: "http://10.0.0.2:8080", Retries: 1, Duration: 1500 * time.Microsecond},
			`192.0.2.1 - - [01/Dec/2026:10:00:00 +0000] "GET /x HTTP/1.1" 200 3 "-" "-" s - 1.500 shop.test http://10.0.0.2:8080 1` + "\n"},
	}
	for _, c := range cases {
		got := string(a.format(nil, c.e))
		if got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
		if strings.Count(got, `"`) != 6 {
			t.Errorf("a line has %d quotes, want 6: %q", strings.Count(got, `"`), got)
		}
		for i := 0; i < len(got)-1; i++ {
			if got[i] < 0x20 || got[i] > 0x7e {
				t.Errorf("raw byte %#x in %q", got[i], got)
			}
		}
	}
}

// FuzzCombinedLog: whatever the request fields hold, a combined line has
// exactly six quotes, one newline at its end and only printable ASCII.
func FuzzCombinedLog(f *testing.F) {
	f.Add("GET", `/a"b`, "HTTP/1.1", "ref", "ua")
	f.Add("G\"T", "/\x9b", "HTTP/2.0", "", "\x00")
	f.Fuzz(func(t *testing.T, method, uri, proto, ref, ua string) {
		a := &accessLog{}
		line := string(a.format(nil, accessEntry{Method: method, URI: uri, Proto: proto, Referer: ref, UserAgent: ua, Client: "c", Site: "s"}))
		if strings.Count(line, `"`) != 6 || strings.IndexByte(line, '\n') != len(line)-1 {
			t.Fatalf("forged line %q", line)
		}
		for i := 0; i < len(line)-1; i++ {
			if line[i] < 0x20 || line[i] > 0x7e {
				t.Fatalf("raw byte %#x in %q", line[i], line)
			}
		}
	})
}
