package cachesim

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/edgecache/edge/indicators"
)

// TestSimulateSmall runs the simulator on a synthetic Zipf trace and checks
// the ordering the paper predicts: opt ≤ fna-home ≤ fno.
func TestSimulateSmall(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	keys := make([]uint64, 60000)
	for i := range keys {
		keys[i] = uint64(math.Floor(math.Pow(rng.Float64(), 3) * 20000))
	}
	res, err := Simulate(keys, Config{Caches: 3, CacheSize: 1000, BPE: 14, UpdateInterval: 500, Costs: []float64{1, 2, 3}, MissPenalty: 100, Replicas: 1, Seed: 1}, []string{"opt", "fno", "fna", "fna-home"})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Result{}
	for _, r := range res {
		byName[r.Policy] = r
	}
	if byName["opt"].CostVsOpt != 1 || byName["fna-home"].CostPerRequest > byName["fno"].CostPerRequest || byName["opt"].CostPerRequest > byName["fna-home"].CostPerRequest {
		t.Errorf("ordering: %+v", byName)
	}
	if byName["fno"].FNRatio <= 0 {
		t.Error("stale indicators produced no false negatives")
	}
}

// TestFNANeverLosesWhenCachesNeverFill is the regression test for the
// authors' ν = 1 rule: fewer distinct keys than capacity and few
// advertisements drive the bit-count fnr estimate past 1 − q, h clips to 1,
// and without the rule fna asks the cheapest negatively indicated cache
// alone and costs more than fno (measured 1.6× before the fix).
func TestFNANeverLosesWhenCachesNeverFill(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	keys := make([]uint64, 40000)
	for i := range keys {
		keys[i] = uint64(math.Floor(math.Pow(rng.Float64(), 2) * 5000)) // 5000 distinct < 3 × 10 000
	}
	for _, est := range []indicators.FNREstimator{indicators.FNRBits, indicators.FNRCount, indicators.FNRExact} {
		for _, faithful := range []bool{false, true} {
			for _, clients := range []int{1, 3} {
				c := Config{Caches: 3, CacheSize: 10000, BPE: 14, UpdateInterval: 1000, Costs: []float64{1, 2, 3}, MissPenalty: 100,
					Replicas: 1, Seed: 1, FNREstimator: est, Faithful: faithful, Clients: clients}
				res, err := Simulate(keys, c, []string{"fno", "fna", "fna-home"})
				if err != nil {
					t.Fatal(err)
				}
				fno, fna, home := res[0].CostPerRequest, res[1].CostPerRequest, res[2].CostPerRequest
				// Under the authors' rules with their bit-count estimate, fna
				// is level with fno here (measured +0.1 %: the few negative
				// probes it still sends cost their access, see
				// docs/indicators.md); the bug this guards against cost +70 %.
				slack := 1.0
				if faithful {
					slack = 1.005
				}
				if fna > fno*slack || home > fno {
					t.Errorf("%s faithful=%v clients=%d: fno %.3f, fna %.3f, fna-home %.3f per request", est, faithful, clients, fno, fna, home)
				}
			}
		}
	}
}

// TestFaithfulPlacementIsKeyModN: under the authors' rules key x lives at
// cache x mod n, so a trace of keys ≡ 0 mod 3 fills cache 0 only, and
// every hit opt finds costs 1.
func TestFaithfulPlacementIsKeyModN(t *testing.T) {
	keys := make([]uint64, 3000)
	for i := range keys {
		keys[i] = uint64(3 * (i % 100))
	}
	c := Config{Caches: 3, CacheSize: 1000, BPE: 14, UpdateInterval: 10, Costs: []float64{1, 2, 3}, MissPenalty: 100, Replicas: 1, Faithful: true}
	res, err := Simulate(keys, c, []string{"opt"})
	if err != nil {
		t.Fatal(err)
	}
	// 100 cold misses, then 2900 hits at cache 0.
	if want := (100*100 + 2900*1) / 3000.0; math.Abs(res[0].CostPerRequest-want) > 1e-9 {
		t.Errorf("opt cost %v, want %v", res[0].CostPerRequest, want)
	}
}

// TestFNALearnedNeverLosesWhereFNAHomeDoes: a long tail of one-hit wonders
// (a CDN's churn) makes most negative indications at a key's home true
// misses, while the paper's bit-count fnr estimate still says a third of
// them are false: fna-home keeps probing and costs more than fno.
// fna-learned's correction learns the realised negative-hit rate and stays
// within simulation noise of fno, with both rule sets and with costs
// 1,1,R,R,R as between two regions.
func TestFNALearnedNeverLosesWhereFNAHomeDoes(t *testing.T) {
	keys := oneHitHeavyKeys(5, 6, func(rng *rand.Rand) uint64 { return uint64(math.Floor(math.Pow(rng.Float64(), 3) * 20000)) })
	hostile := false
	for _, faithful := range []bool{false, true} {
		for _, costs := range [][]float64{{1, 2, 3}, {1, 1, 10, 10, 10}} {
			c := Config{Caches: len(costs), CacheSize: 2000, BPE: 14, UpdateInterval: 200, Costs: costs, MissPenalty: 100, Replicas: 1, Seed: 1, Faithful: faithful}
			res, err := Simulate(keys, c, []string{"fno", "fna-home", "fna-learned", "fna-rate"})
			if err != nil {
				t.Fatal(err)
			}
			fno, home, learned, rate := res[0].CostPerRequest, res[1].CostPerRequest, res[2].CostPerRequest, res[3].CostPerRequest
			t.Logf("faithful=%v costs=%v: fno %.3f, fna-home %.3f (%.4f×), fna-learned %.3f (%.4f×), fna-rate %.3f (%.4f×)", faithful, costs, fno, home, home/fno, learned, learned/fno, rate, rate/fno)
			if learned > fno*1.005 {
				t.Errorf("faithful=%v costs=%v: fna-learned %.3f per request, fno %.3f: more than 0.5 %% worse", faithful, costs, learned, fno)
			}
			if rate > fno*1.005 {
				t.Errorf("faithful=%v costs=%v: fna-rate %.3f per request, fno %.3f: more than 0.5 %% worse", faithful, costs, rate, fno)
			}
			hostile = hostile || home > fno*1.005
		}
	}
	if !hostile {
		t.Error("fna-home never lost more than 0.5 % to fno: the trace no longer tests what it is for")
	}
}

// TestFNARateLearnsSoonReuse: on a trace whose keys come back soon after
// their first miss (a crowd, a moving popularity), the negatives that hit
// are the keys inserted since the last advertisement, far more often than
// the derived ν (an average over every held key) says. fna-rate learns
// the realised rate and removes at least half of fno's excess over opt,
// and does no worse than fna-learned (which here removes 0.91 against
// fna-rate's 0.96; on the drift trace, whose popularity also moves, 0.12
// against 0.82 at the paper's setting: docs/indicators.md).
func TestFNARateLearnsSoonReuse(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	keys := make([]uint64, 0, 80000)
	next := uint64(1)
	var recent []uint64
	for len(keys) < cap(keys) {
		switch r := rng.IntN(10); {
		case r < 4 || len(recent) == 0: // a new key
			keys = append(keys, next)
			recent = append(recent, next)
			next++
		case r < 8: // one of the last 300 new keys, again
			keys = append(keys, recent[max(0, len(recent)-1-rng.IntN(300))])
		default: // a long tail
			keys = append(keys, uint64(1<<40)+uint64(rng.IntN(1<<30)))
		}
	}
	c := Config{Caches: 3, CacheSize: 2000, BPE: 14, UpdateInterval: 500, Costs: []float64{1, 2, 3}, MissPenalty: 100, Replicas: 1, Seed: 1}
	res, err := Simulate(keys, c, []string{"opt", "fno", "fna-learned", "fna-rate"})
	if err != nil {
		t.Fatal(err)
	}
	opt, fno, learned, rate := res[0].CostPerRequest, res[1].CostPerRequest, res[2].CostPerRequest, res[3].CostPerRequest
	removed := func(v float64) float64 { return (fno - v) / (fno - opt) }
	t.Logf("opt %.3f, fno %.3f, fna-learned %.3f (removes %.2f), fna-rate %.3f (removes %.2f)", opt, fno, learned, removed(learned), rate, removed(rate))
	if fno-opt < 0.05*opt {
		t.Fatalf("fno is within 5 %% of opt: the trace no longer has false negatives worth recovering")
	}
	if removed(rate) < 0.5 {
		t.Errorf("fna-rate removes %.2f of fno's excess, want at least half", removed(rate))
	}
	if rate > learned {
		t.Errorf("fna-rate %.3f per request, fna-learned %.3f: want fna-rate no worse here", rate, learned)
	}
}

// TestFNARateExplorationDoesNotGrowWithHomes: fna-rate explores at most
// one negatively indicated home per request, so on a trace whose
// negatives never pay (70 % one-hit keys) its cost stays within 0.5 % of
// fno's however many homes a key has, at the costs where exploring costs
// most (c = M/4, the taper's middle). Exploring each home with its own
// chance cost 1.0080 × fno at three homes and 1.0134 at five (a review's
// measurement).
func TestFNARateExplorationDoesNotGrowWithHomes(t *testing.T) {
	keys := oneHitHeavyKeys(13, 14, func(rng *rand.Rand) uint64 { return uint64(rng.IntN(40000)) })
	for _, tc := range []struct{ caches, replicas int }{{3, 1}, {3, 3}, {5, 5}} {
		costs := make([]float64, tc.caches)
		for i := range costs {
			costs[i] = 25
		}
		c := Config{Caches: tc.caches, CacheSize: 2000, BPE: 14, UpdateInterval: 200, Costs: costs, MissPenalty: 100, Replicas: tc.replicas, Seed: 1}
		res, err := Simulate(keys, c, []string{"fno", "fna-rate"})
		if err != nil {
			t.Fatal(err)
		}
		fno, rate := res[0].CostPerRequest, res[1].CostPerRequest
		t.Logf("%d caches, %d homes per key: fno %.3f, fna-rate %.3f (%.4f×)", tc.caches, tc.replicas, fno, rate, rate/fno)
		if rate > fno*1.005 {
			t.Errorf("%d caches, %d homes per key: fna-rate %.3f, fno %.3f: more than 0.5 %% worse", tc.caches, tc.replicas, rate, fno)
		}
	}
}

// oneHitHeavyKeys is 60,000 requests of which 70 % are keys never seen
// again and the rest come from other: a trace on which negative
// indications are nearly always true misses.
func oneHitHeavyKeys(seed1, seed2 uint64, other func(*rand.Rand) uint64) []uint64 {
	rng := rand.New(rand.NewPCG(seed1, seed2))
	keys := make([]uint64, 60000)
	fresh := uint64(1 << 40)
	for i := range keys {
		if rng.IntN(10) < 7 {
			fresh++
			keys[i] = fresh
		} else {
			keys[i] = other(rng)
		}
	}
	return keys
}

// TestOwnFillsAreTheOneClientsFalseNegatives: with one client every key a
// cache took since its last advertisement was placed there by that
// client's own miss, so a client that remembers its fills sees no false
// negative at all, and fno pays less; with two clients each sees the
// other's fills as negatives. opt, which reads the caches, is unchanged.
func TestOwnFillsAreTheOneClientsFalseNegatives(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	keys := make([]uint64, 60000)
	for i := range keys {
		keys[i] = uint64(math.Floor(math.Pow(rng.Float64(), 3) * 20000))
	}
	run := func(clients int, own, faithful bool) (opt, fno Result) {
		t.Helper()
		c := Config{Caches: 3, CacheSize: 1000, BPE: 14, UpdateInterval: 500, Costs: []float64{1, 2, 3}, MissPenalty: 100, Replicas: 1, Seed: 1, Clients: clients, OwnFills: own, Faithful: faithful}
		res, err := Simulate(keys, c, []string{"opt", "fno"})
		if err != nil {
			t.Fatal(err)
		}
		return res[0], res[1]
	}
	for _, faithful := range []bool{false, true} {
		opt, fno := run(1, false, faithful)
		optOwn, fnoOwn := run(1, true, faithful)
		_, fnoTwo := run(2, true, faithful)
		t.Logf("faithful %v: opt %.3f, fno %.3f (fn %.4f), with own fills %.3f (fn %.4f), two clients %.3f (fn %.4f)",
			faithful, opt.CostPerRequest, fno.CostPerRequest, fno.FNRatio, fnoOwn.CostPerRequest, fnoOwn.FNRatio, fnoTwo.CostPerRequest, fnoTwo.FNRatio)
		if optOwn.CostPerRequest != opt.CostPerRequest {
			t.Errorf("faithful %v: opt %.4f with own fills, %.4f without: the oracle reads the caches", faithful, optOwn.CostPerRequest, opt.CostPerRequest)
		}
		if fno.FNRatio <= 0 || fnoOwn.FNRatio != 0 {
			t.Errorf("faithful %v: false negatives %.4f without own fills, %.4f with: want some, then none", faithful, fno.FNRatio, fnoOwn.FNRatio)
		}
		if fnoTwo.FNRatio <= 0 {
			t.Errorf("faithful %v: two clients saw no false negative: each should miss the other's fills", faithful)
		}
		if fnoOwn.CostPerRequest >= fno.CostPerRequest {
			t.Errorf("faithful %v: fno %.3f with own fills, %.3f without: want less", faithful, fnoOwn.CostPerRequest, fno.CostPerRequest)
		}
	}
}

// TestOwnFillsLeaveQToTheFilter: a key the client placed itself is a
// positive indication for the selection, while q counts what the
// advertised filter said, as fnr does (indicate says why).
func TestOwnFillsLeaveQToTheFilter(t *testing.T) {
	f, err := indicators.NewFilter(indicators.DefaultFilterConfig(1000))
	if err != nil {
		t.Fatal(err)
	}
	var b [8]byte
	for i := range 100 {
		binary.BigEndian.PutUint64(b[:], uint64(i))
		f.Insert(b[:])
	}
	snap := f.Advertise(func(yield func([]byte) bool) {
		for i := range 100 {
			var k [8]byte
			binary.BigEndian.PutUint64(k[:], uint64(i))
			if !yield(k[:]) {
				return
			}
		}
	})
	payload := indicators.EncodeFull(snap)
	var knows, raw indicators.Replica
	for _, r := range []*indicators.Replica{&knows, &raw} {
		if err := r.Apply(payload); err != nil {
			t.Fatal(err)
		}
	}
	const placed = 5000 // after the advertisement: the filter says no
	binary.BigEndian.PutUint64(b[:], placed)
	own := map[uint64]struct{}{placed: {}}
	for range 200 {
		if !indicate(&knows, b[:], placed, own, true) {
			t.Fatal("a key the client placed itself read as negative")
		}
		if indicate(&raw, b[:], placed, nil, true) {
			t.Fatal("a key the filter never held read as positive without own fills")
		}
	}
	for name, r := range map[string]*indicators.Replica{"with own fills": &knows, "without": &raw} {
		if q := r.Exclusion().Q; q > 0.1 {
			t.Errorf("%s: q %v after 200 keys the filter says no to, want near 0", name, q)
		}
		if q := r.HomeExclusion().Q; q > 0.1 {
			t.Errorf("%s: home q %v after 200 keys the filter says no to, want near 0", name, q)
		}
	}
}

// TestNegOracleBoundsWhatNegativesCanClose: the neg-oracle bound lies
// between opt and fno, asks negatively indicated caches, and closes most
// of fno's excess on a trace whose false negatives are stale indicators
// (a bound on what deciding which negatives to ask can remove).
func TestNegOracleBoundsWhatNegativesCanClose(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	keys := make([]uint64, 60000)
	for i := range keys {
		keys[i] = uint64(math.Floor(math.Pow(rng.Float64(), 3) * 20000))
	}
	res, err := Simulate(keys, Config{Caches: 3, CacheSize: 1000, BPE: 14, UpdateInterval: 500, Costs: []float64{1, 2, 3}, MissPenalty: 100, Replicas: 1, Seed: 1}, []string{"opt", "fno", "neg-oracle"})
	if err != nil {
		t.Fatal(err)
	}
	opt, fno, bound := res[0], res[1], res[2]
	if !(opt.CostPerRequest <= bound.CostPerRequest && bound.CostPerRequest < fno.CostPerRequest) {
		t.Fatalf("opt %.3f, neg-oracle %.3f, fno %.3f: want opt ≤ neg-oracle < fno", opt.CostPerRequest, bound.CostPerRequest, fno.CostPerRequest)
	}
	if share := (fno.CostPerRequest - bound.CostPerRequest) / (fno.CostPerRequest - opt.CostPerRequest); share < 0.5 {
		t.Errorf("neg-oracle removes %.2f of fno's excess, want most of it on a trace of stale false negatives", share)
	}
	if bound.NegativeProbes <= 0 {
		t.Error("neg-oracle asked no negatively indicated cache")
	}
}

// TestTrustedOwnFillsCloseTheOneClientGap: with one client every false
// negative is the client's own fill, so a client that remembers its fills
// and trusts them (the -own suffix, what the cluster's first hop gives an
// ingress) comes within a hair of the neg-oracle bound, whatever policy it
// runs; with four clients, each knowing only its own, less of the gap is
// its own.
func TestTrustedOwnFillsCloseTheOneClientGap(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	keys := make([]uint64, 60000)
	for i := range keys {
		keys[i] = uint64(math.Floor(math.Pow(rng.Float64(), 3) * 20000))
	}
	cfg := Config{Caches: 3, CacheSize: 1000, BPE: 14, UpdateInterval: 500, Costs: []float64{1, 2, 3}, MissPenalty: 100, Replicas: 1, Seed: 1}
	share := func(c Config, p string) float64 {
		res, err := Simulate(keys, c, []string{"opt", "fno", p})
		if err != nil {
			t.Fatal(err)
		}
		return (res[1].CostPerRequest - res[2].CostPerRequest) / (res[1].CostPerRequest - res[0].CostPerRequest)
	}
	for _, p := range []string{"fno-own", "fna-rate-own"} {
		if s := share(cfg, p); s < 0.85 {
			t.Errorf("%s removes %.2f of fno's excess with one client, want nearly all", p, s)
		}
	}
	four := cfg
	four.Clients = 4
	if one, many := share(cfg, "fno-own"), share(four, "fno-own"); many >= one {
		t.Errorf("fno-own removes %.2f with four clients and %.2f with one: each of four knows a quarter of the fills", many, one)
	}
	if _, err := Simulate(keys, cfg, []string{"nosuch-own"}); err == nil {
		t.Error("an unknown policy with -own was taken")
	}
}
