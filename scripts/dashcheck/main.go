// Command dashcheck checks the Grafana dashboard against real data: it
// starts a three-node demo cluster and Prometheus (dashboards/prometheus.yml),
// drives load through every node, makes one node stall so that suspicions
// and detection times exist, sends a forged heartbeat, then evaluates every
// panel query through the Prometheus HTTP API and fails if any errors or
// returns nothing.
//
//	go run ./scripts/dashcheck [-edge bin/edge] [-prometheus prometheus]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/load"
)

const promAddr = "127.0.0.1:19090"

func main() {
	edge := flag.String("edge", "bin/edge", "edge binary")
	prom := flag.String("prometheus", "prometheus", "prometheus binary")
	dash := flag.String("dashboard", "dashboards/edge.json", "dashboard JSON")
	cfg := flag.String("config", "dashboards/prometheus.yml", "Prometheus configuration")
	flag.Parse()
	if err := run(*edge, *prom, *dash, *cfg); err != nil {
		fmt.Fprintln(os.Stderr, "dashboards-check:", err)
		os.Exit(1)
	}
}

func run(edge, prom, dashFile, cfg string) error {
	exprs, err := panelQueries(dashFile)
	if err != nil {
		return err
	}
	demo := exec.Command(edge, "demo", "--nodes", "3", "--serve-args", "--log-level error")
	if err := demo.Start(); err != nil {
		return err
	}
	defer stop(demo)
	dir, err := os.MkdirTemp("", "prom")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p := exec.Command(prom, "--config.file="+cfg, "--storage.tsdb.path="+dir, "--web.listen-address="+promAddr, "--log.level=warn")
	if err := p.Start(); err != nil {
		return fmt.Errorf("starting prometheus: %w", err)
	}
	defer stop(p)
	for _, a := range []string{"127.0.0.1:9180", "127.0.0.1:9181", "127.0.0.1:9182"} {
		if err := waitHTTP("http://"+a+"/readyz", 20*time.Second); err != nil {
			return err
		}
	}
	if err := waitHTTP("http://"+promAddr+"/-/ready", 30*time.Second); err != nil {
		return err
	}
	fmt.Println("cluster and Prometheus up; driving load for 40 s (flash crowd + Zipf, one node stalled for 1 s, one forged heartbeat)")
	go func() {
		time.Sleep(15 * time.Second)
		if pid := nodePID("edge-3"); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
			time.Sleep(time.Second)
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		forged, _ := wire.Heartbeat{Node: "edge-2", To: "edge-1", Incarnation: 1, Seq: 1, SendNs: time.Now().UnixNano()}.Encode([]byte("not-the-secret"))
		if c, err := net.Dial("udp", "127.0.0.1:7946"); err == nil {
			_, _ = c.Write(forged)
			c.Close()
		}
	}()
	z := load.NewZipf(0.8, 5000)
	s := load.Run(context.Background(), load.Config{
		Targets: []string{"http://127.0.0.1:8080", "http://127.0.0.1:8081", "http://127.0.0.1:8082"},
		Rate:    300, Duration: 40 * time.Second, MaxInflight: 2000, Timeout: 5 * time.Second,
		Path: func(i int, r *rand.Rand) string {
			if r.Float64() < 0.3 {
				return "/p/0"
			}
			return "/p/" + strconv.Itoa(1+z.Sample(r))
		},
	})
	fmt.Printf("load: %d requests, %d errors, hit ratio %.1f%%\n", s.Requests, s.Errors, 100*s.HitRatio)
	time.Sleep(6 * time.Second) // one more scrape
	failed := 0
	for _, e := range exprs {
		q := strings.ReplaceAll(e.expr, "$__rate_interval", "1m")
		n, err := query(q)
		status := "ok"
		switch {
		case err != nil:
			status, failed = "ERROR "+err.Error(), failed+1
		case n == 0 && emptyWithout(q) != "":
			status = "empty (" + emptyWithout(q) + ")"
		case n == 0:
			status, failed = "EMPTY", failed+1
		}
		fmt.Printf("  %-50s %-6s %3d series  %s\n", e.panel, e.ref, n, status)
	}
	out, err := exec.Command(strings.Replace(prom, "prometheus", "promtool", 1), "check", "config", cfg).CombinedOutput()
	fmt.Printf("promtool check config %s:\n%s", cfg, out)
	if err != nil {
		return fmt.Errorf("promtool: %w", err)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d panel queries failed", failed, len(exprs))
	}
	fmt.Printf("all %d panel queries returned data\n", len(exprs))
	return nil
}

type panelExpr struct{ panel, ref, expr string }

// emptyWithout says which feature, off in the demo, a query needs to
// return anything: such a panel shows "No data" where the feature is off,
// which is the truth (a certificate's days to expiry shown as 0 on a
// cluster without TLS was not).
func emptyWithout(q string) string {
	if strings.Contains(q, "edge_tls_certificate_expiry_timestamp_seconds") {
		return "no TLS in the demo"
	}
	return ""
}

func panelQueries(file string) ([]panelExpr, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var out []panelExpr
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			out = append(out, panelExpr{p.Title, t.RefID, t.Expr})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no panel queries", file)
	}
	return out, nil
}

func query(q string) (int, error) {
	resp, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s", r.Error)
	}
	return len(r.Data.Result), nil
}

func waitHTTP(u string, d time.Duration) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if resp, err := http.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s", u, d)
}

func nodePID(id string) int {
	out, err := exec.Command("pgrep", "-f", "node-id "+id).Output()
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.Fields(string(out))[0])
	return pid
}

func stop(c *exec.Cmd) {
	if c.Process != nil {
		_ = c.Process.Signal(syscall.SIGTERM)
		_ = c.Wait()
	}
}
