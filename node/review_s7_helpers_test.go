package node

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
)

// s7Origin is a test origin that names itself in every body and counts
// requests.
type s7Origin struct {
	*httptest.Server
	name  string
	calls atomic.Int64
	cc    atomic.Value // Cache-Control it answers with (string)
}

func newS7Origin(t *testing.T, name string) *s7Origin {
	t.Helper()
	o := &s7Origin{name: name}
	o.cc.Store("max-age=600")
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.calls.Add(1)
		w.Header().Set("Cache-Control", o.cc.Load().(string))
		w.Header().Set("Surrogate-Key", "shared-tag")
		_, _ = io.WriteString(w, "origin="+o.name+" path="+r.URL.RequestURI())
	}))
	t.Cleanup(o.Close)
	return o
}

// s7Node is a node started from a YAML file that a test rewrites and
// reloads.
type s7Node struct {
	*Node
	file     string
	pub, adm string
	t        *testing.T
}

const s7Token = "admin-token-0123456789"

// startS7Node writes head (listen/admin are added) + body to a file and
// starts a node on it with reload enabled.
func startS7Node(t *testing.T, body string) *s7Node {
	t.Helper()
	s := &s7Node{file: t.TempDir() + "/edge.yaml", pub: freeAddr(t), adm: freeAddr(t), t: t}
	s.write(body)
	s.run()
	// Wait until the listener answers.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + s.adm + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

func (s *s7Node) write(body string) {
	s.t.Helper()
	id := "node_id: s7\n"
	if strings.Contains(body, "node_id:") {
		id = ""
	}
	conf := "listen: '" + s.pub + "'\nadmin: {listen: '" + s.adm + "', token: '" + s7Token + "'}\n" + id + body
	if err := os.WriteFile(s.file+".tmp", []byte(conf), 0o600); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(s.file+".tmp", s.file); err != nil {
		s.t.Fatal(err)
	}
}

func (s *s7Node) load() (*config.Config, map[string]string, error) {
	v, err := config.NewViper(s.file)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := config.Load(v)
	if err != nil {
		return nil, nil, err
	}
	return cfg, config.Settings(v), nil
}

// reload writes body and POSTs /reload; it returns the status and answer.
func (s *s7Node) reload(body string) (int, string) {
	s.t.Helper()
	s.write(body)
	return s.admin("POST", "/reload")
}

func (s *s7Node) admin(method, path string) (int, string) {
	s.t.Helper()
	req, _ := http.NewRequest(method, "http://"+s.adm+path, nil)
	req.Header.Set("Authorization", "Bearer "+s7Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// get asks the public listener for path with host as Host (raw HTTP/1.1,
// so the hit path may answer).
func (s *s7Node) get(host, path string) (int, string) {
	s.t.Helper()
	resp, body := rawAsk(s.t, s.pub, "GET "+path+" HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
	return resp.StatusCode, body
}

// s7Site is one site's YAML.
func s7Site(name string, hosts []string, origins []string, extra string) string {
	return "  - name: " + name + "\n    hosts: ['" + strings.Join(hosts, "', '") + "']\n    origins: ['" + strings.Join(origins, "', '") + "']\n" + extra
}

// run starts a node on s's file with reload enabled, stopped at the
// test's end.
func (s *s7Node) run() {
	t := s.t
	cfg, settings, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	n.EnableReload(s.load, nil, settings)
	s.Node = n
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
