package node

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestS7ReloadUnderLoadNeverAnswersFromTheWrongOrigin runs 8 clients
// against two sites (uncacheable answers, so every request reaches an
// origin) while the config is reloaded 12 times, each changing the shop
// site's pool (members added, removed, replaced; least and hash
// balancing; an active health check on some). It checks:
//   - no failed request (a non-200 or a transport error);
//   - no request answered by another site's origin;
//   - a request that started after Reload returned is answered by an
//     origin of the config in force (or of the next one, if another
//     reload came during it);
//   - once the last reload has returned and in-flight requests are
//     done, origins no longer in the config get no request at all
//     (client traffic or health checks).
func TestS7ReloadUnderLoadNeverAnswersFromTheWrongOrigin(t *testing.T) {
	type org struct {
		*httptest.Server
		name   string
		calls  atomic.Int64
		health atomic.Int64
	}
	mk := func(name string) *org {
		o := &org{name: name}
		o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" {
				o.health.Add(1)
				return
			}
			o.calls.Add(1)
			time.Sleep(2 * time.Millisecond)
			w.Header().Set("Cache-Control", "no-store")
			_, _ = io.WriteString(w, "origin="+name)
		}))
		t.Cleanup(o.Close)
		return o
	}
	origins := map[string]*org{}
	for _, nm := range []string{"S1", "S2", "S3", "S4", "BLOG"} {
		origins[nm] = mk(nm)
	}
	blog := s7Site("blog", []string{"blog.test"}, []string{origins["BLOG"].URL}, "")
	conf := func(extra string, names ...string) string {
		var urls []string
		for _, nm := range names {
			urls = append(urls, origins[nm].URL)
		}
		return "sites:\n" + s7Site("shop", []string{"shop.test"}, urls, extra) + blog
	}
	health := "    health: {path: '/healthz', interval: '50ms', timeout: '1s'}\n"
	hash := "    balance: hash\n"
	plan := []struct {
		extra string
		names []string
	}{
		{health, []string{"S1", "S2"}},
		{"", []string{"S1"}},
		{hash, []string{"S3", "S4"}},
		{health, []string{"S2"}},
		{"", []string{"S1", "S3"}},
		{hash + health, []string{"S4"}},
		{"", []string{"S2", "S3"}},
		{health, []string{"S1"}},
		{hash, []string{"S3"}},
		{"", []string{"S4", "S2"}},
		{health, []string{"S3", "S1"}},
		{"", []string{"S2"}},
	}
	n := startS7Node(t, conf(plan[0].extra, plan[0].names...))
	var epoch atomic.Int64 // index in plan of the config in force (after Reload returned)
	allowed := func(e int64, name string) bool {
		for _, i := range []int64{e, e + 1} {
			if i < int64(len(plan)) {
				for _, nm := range plan[i].names {
					if nm == name {
						return true
					}
				}
			}
		}
		return false
	}
	var (
		mu       sync.Mutex
		problems []string
		total    atomic.Int64
	)
	report := func(s string) {
		mu.Lock()
		if len(problems) < 20 {
			problems = append(problems, s)
		}
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				host := "shop.test"
				if (w+i)%4 == 0 {
					host = "blog.test"
				}
				req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/u/%d/%d", n.pub, w, i), nil)
				req.Host = host
				e := epoch.Load()
				resp, err := client.Do(req)
				total.Add(1)
				if err != nil {
					report(fmt.Sprintf("%s: %v", host, err))
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body := string(b)
				name := strings.TrimPrefix(body, "origin=")
				switch {
				case resp.StatusCode != 200:
					report(fmt.Sprintf("%s at epoch %d: %d %q", host, e, resp.StatusCode, body))
				case host == "blog.test" && name != "BLOG":
					report(fmt.Sprintf("blog.test answered by %s", name))
				case host == "shop.test" && !allowed(e, name):
					report(fmt.Sprintf("shop.test started at config %d %v answered by %s", e, plan[e].names, name))
				}
			}
		}()
	}
	for i := 1; i < len(plan); i++ {
		time.Sleep(150 * time.Millisecond)
		code, body := n.reload(conf(plan[i].extra, plan[i].names...))
		if code != 200 {
			t.Fatalf("reload %d: %d %s", i, code, body)
		}
		epoch.Store(int64(i))
	}
	time.Sleep(300 * time.Millisecond) // requests started before the last reload finish
	last := plan[len(plan)-1].names
	base := map[string][2]int64{}
	for nm, o := range origins {
		base[nm] = [2]int64{o.calls.Load(), o.health.Load()}
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	for nm, o := range origins {
		if nm == "BLOG" || strings.Contains(strings.Join(last, ","), nm) {
			continue
		}
		if d, h := o.calls.Load()-base[nm][0], o.health.Load()-base[nm][1]; d > 0 || h > 0 {
			report(fmt.Sprintf("origin %s, removed from the pool, got %d requests and %d health checks in the second after the last reload settled", nm, d, h))
		}
	}
	t.Logf("%d requests across %d reloads", total.Load(), len(plan)-1)
	for _, p := range problems {
		t.Error(p)
	}
}
