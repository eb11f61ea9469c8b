// Command gossipdetect measures how long a crashed node takes to leave
// every other node's view: it starts an `edge demo` cluster (one process
// per node), waits for the views to converge, SIGKILLs one node, and reads
// from every survivor's status page the time at which it stopped trusting
// the victim (each peer's transition history). It prints the spread of
// those detection times, and how many survivors monitored the victim
// directly (the rest learned it by gossip with subset monitoring).
//
//	go run ./scripts/gossipdetect [-nodes 40] [-serve-args "--monitoring subset"] [-trials 3]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgecache/edge/internal/demoproc"
)

type peerState struct {
	ID        string `json:"id"`
	Trusted   bool   `json:"trusted"`
	Monitored bool   `json:"monitored"`
	History   []struct {
		At      time.Time `json:"At"`
		Trusted bool      `json:"Trusted"`
	} `json:"history"`
}

func status(adm string) ([]peerState, error) {
	resp, err := http.Get("http://" + adm + "/status.json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var s struct {
		Peers []peerState `json:"peers"`
	}
	return s.Peers, json.NewDecoder(resp.Body).Decode(&s)
}

func main() {
	nodes := flag.Int("nodes", 40, "cluster size")
	serveArgs := flag.String("serve-args", "--monitoring subset", "extra edge serve arguments")
	trials := flag.Int("trials", 3, "nodes killed, one after another")
	bin := flag.String("edge", "bin/edge", "edge binary")
	flag.Parse()
	demo, err := demoproc.Start(*bin, *nodes, strings.TrimSpace("--log-level error "+*serveArgs), "--origin-listen", "127.0.0.1:8070")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	err = measure(demo, *nodes, *trials, *serveArgs)
	demo.Stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// measure kills trials nodes of the running demo, one after another, and
// prints how long each took to leave every survivor's view.
func measure(demo *demoproc.Cluster, nodes, trials int, serveArgs string) error {
	adm := demo.Admin
	alive := map[int]bool{}
	for i := 1; i <= nodes; i++ {
		alive[i] = true
	}
	converged := func() bool {
		for i := range alive {
			ps, err := status(adm(i))
			if err != nil || len(ps) != nodes-1 {
				return false
			}
			for _, p := range ps {
				if alive[idNum(p.ID)] != p.Trusted {
					return false
				}
			}
		}
		return true
	}
	fmt.Printf("%d nodes, serve args %q, %s\n", nodes, serveArgs, time.Now().UTC().Format("2006-01-02"))
	for trial := range trials {
		deadline := time.Now().Add(3 * time.Minute)
		for !converged() {
			if time.Now().After(deadline) {
				return fmt.Errorf("views did not converge in 3 minutes")
			}
			time.Sleep(500 * time.Millisecond)
		}
		time.Sleep(3 * time.Second) // settled
		victim := 3 + trial*7
		victimID := "edge-" + strconv.Itoa(victim)
		monitored := 0
		for i := range alive {
			if i == victim {
				continue
			}
			ps, _ := status(adm(i))
			for _, p := range ps {
				if p.ID == victimID && p.Monitored {
					monitored++
				}
			}
		}
		out, err := exec.Command("pgrep", "-f", "node-id "+victimID+" ").Output()
		pid, _ := strconv.Atoi(strings.TrimSpace(strings.Split(string(out), "\n")[0]))
		if err != nil || pid == 0 {
			return fmt.Errorf("victim process %s not found", victimID)
		}
		killed := time.Now()
		_ = syscall.Kill(pid, syscall.SIGKILL)
		delete(alive, victim)
		time.Sleep(5 * time.Second)
		var took []time.Duration
		for i := range alive {
			ps, _ := status(adm(i))
			for _, p := range ps {
				if p.ID != victimID {
					continue
				}
				for _, h := range p.History {
					if !h.Trusted && h.At.After(killed) {
						took = append(took, h.At.Sub(killed))
						break
					}
				}
			}
		}
		slices.Sort(took)
		if len(took) == 0 {
			fmt.Printf("kill %s: no survivor suspected it within 5 s\n", victimID)
			continue
		}
		fmt.Printf("kill %s: suspected by %d of %d survivors (%d monitored it); detection min %v, median %v, max %v\n",
			victimID, len(took), len(alive), monitored, took[0].Round(time.Millisecond), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	}
	return nil
}

func idNum(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "edge-"))
	return n
}
