package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/edgecache/edge/demosite"
	"github.com/edgecache/edge/load"
)

// rollingResult is a rolling restart under load: every node in turn is
// taken out of the load's rotation (as a load balancer drains it), sent
// SIGTERM, started again, and put back once it is ready and a member at
// every node.
type rollingResult struct {
	Rate      float64      `json:"rate"`
	Restarted int          `json:"restarted"`
	MeanS     float64      `json:"mean_restart_s"` // drain to back in rotation
	MaxS      float64      `json:"max_restart_s"`
	Load      load.Summary `json:"load"`
	// FalseDeaths are deaths of a node that was not being restarted
	// (its lines at every observer are one death, as in the soak);
	// FalseDeathLines those lines.
	FalseDeaths     int `json:"false_deaths"`
	FalseDeathLines int `json:"false_death_lines"`
}

// drainWait is how long a node stays in service, out of the rotation,
// before SIGTERM: a load balancer's drain (requests already sent finish).
const drainWait = time.Second

// rolling restarts every node of ids in turn under rate requests per
// second of Zipf pages, the load spread over the nodes in rotation.
func (r *run) rolling(ids []string, rate float64) (rollingResult, error) {
	res := rollingResult{Rate: rate}
	var mu sync.Mutex
	rotation := slices.Clone(ids)
	zipf := load.NewZipf(0.9, 2000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan load.Summary, 1)
	ts := time.Now()
	go func() {
		out <- load.Run(ctx, load.Config{
			Rate: rate, Duration: 24 * time.Hour, Timeout: 10 * time.Second, MaxInflight: 2000,
			Host: "www.rolling.test", AcceptEncoding: load.BrowserAcceptEncoding, Verify: demosite.VerifyPage,
			Target: func(i int) string {
				mu.Lock()
				defer mu.Unlock()
				return "http://" + r.nodes[rotation[i%len(rotation)]].pub
			},
			Path: func(_ int, rng *rand.Rand) string { return fmt.Sprintf("/p/%d", zipf.Sample(rng)) },
		})
	}()
	time.Sleep(5 * time.Second) // warm caches before the first restart
	var total time.Duration
	var failure error
	down := map[string][2]time.Time{} // node → from its SIGTERM until back in rotation
	for _, id := range ids {
		t := time.Now()
		mu.Lock()
		rotation = slices.DeleteFunc(rotation, func(x string) bool { return x == id })
		mu.Unlock()
		time.Sleep(drainWait)
		nd := r.nodes[id]
		stopped := time.Now()
		_ = nd.cmd.Process.Signal(syscall.SIGTERM)
		_ = nd.cmd.Wait()
		tr := time.Now()
		if err := r.start(id); err != nil {
			failure = err
			break
		}
		if err := r.waitMembers(ids, tr, time.Minute); err != nil {
			failure = fmt.Errorf("%s after its restart: %w", id, err)
			break
		}
		if err := waitReady("http://"+nd.adm+"/readyz", 30*time.Second); err != nil {
			failure = fmt.Errorf("%s: %w", id, err)
			break
		}
		mu.Lock()
		rotation = append(rotation, id)
		mu.Unlock()
		down[id] = [2]time.Time{stopped, time.Now()}
		d := time.Since(t)
		total += d
		res.MaxS = max(res.MaxS, d.Seconds())
		res.Restarted++
		time.Sleep(2 * time.Second)
	}
	time.Sleep(3 * time.Second)
	cancel()
	res.Load = <-out
	if res.Restarted > 0 {
		res.MeanS = total.Seconds() / float64(res.Restarted)
	}
	// A node leaving while it was being restarted said goodbye (a line
	// read late still belongs to it for 15 s after it was back); any
	// other "member left" is a false death.
	r.mu.Lock()
	dead := map[string]bool{}
	for _, e := range r.events {
		w, restarted := down[e.peer]
		if e.msg == "member left" && !e.at.Before(ts) && (!restarted || e.at.Before(w[0]) || e.at.After(w[1].Add(15*time.Second))) {
			res.FalseDeathLines++
			dead[e.peer] = true
		}
	}
	res.FalseDeaths = len(dead)
	r.mu.Unlock()
	return res, failure
}

// waitReady polls a readiness URL until it answers 200.
func waitReady(url string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v", within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
