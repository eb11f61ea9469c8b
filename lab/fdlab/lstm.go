package fdlab

import (
	"math"
	"math/rand/v2"
)

// SeedConfig configures ml-seed, the detector of the seed paper.
type SeedConfig struct {
	Eta          int     // η: training set = the latest η arrivals (seed: 500)
	Batch        int     // mini-batch size (seed: 64)
	Epochs       int     // epochs per retraining (seed: 5)
	Epsilon      int     // ε: the margin is the mean of the ε latest errors (seed: 10)
	Seq          int     // residuals the LSTM reads per prediction
	Hidden       int     // LSTM cells
	EarlyPenalty float64 // loss multiplier when the prediction is early
	RetrainEvery int     // retrain after every this many heartbeats (seed: 1)
	LearningRate float64 // Adam step
}

// DefaultSeedConfig follows the seed where it says, and is small elsewhere.
func DefaultSeedConfig() SeedConfig {
	return SeedConfig{Eta: 500, Batch: 64, Epochs: 5, Epsilon: 10, Seq: 10, Hidden: 16, EarlyPenalty: 4, RetrainEvery: 1, LearningRate: 0.005}
}

// MLSeed is the seed's LSTM detector: after each heartbeat (or every
// RetrainEvery) it retrains, keeping its weights, on the η latest arrivals;
// it predicts the next residual from the last Seq residuals; the freshness
// point adds the mean of the ε latest absolute errors.
type MLSeed struct {
	cfg     SeedConfig
	period  float64
	resid   []float64 // the latest η residuals, normalised, oldest first
	mean    float64   // normalisation offset (ns)
	errs    []float64 // latest ε absolute errors (ns)
	pred    float64   // predicted residual of the next heartbeat (ns)
	lastSeq uint64
	seen    bool
	n       int
	net     *lstm
	rng     *rand.Rand
}

// NewMLSeed returns the seed's detector.
func NewMLSeed(period int64, cfg SeedConfig) *MLSeed {
	d := DefaultSeedConfig()
	if cfg.Eta < 20 {
		cfg.Eta = d.Eta
	}
	if cfg.Batch < 1 {
		cfg.Batch = d.Batch
	}
	if cfg.Epochs < 1 {
		cfg.Epochs = d.Epochs
	}
	if cfg.Epsilon < 1 {
		cfg.Epsilon = d.Epsilon
	}
	if cfg.Seq < 1 {
		cfg.Seq = d.Seq
	}
	if cfg.Hidden < 1 {
		cfg.Hidden = d.Hidden
	}
	if cfg.EarlyPenalty <= 0 {
		cfg.EarlyPenalty = d.EarlyPenalty
	}
	if cfg.RetrainEvery < 1 {
		cfg.RetrainEvery = d.RetrainEvery
	}
	if cfg.LearningRate <= 0 {
		cfg.LearningRate = d.LearningRate
	}
	rng := rand.New(rand.NewPCG(7, 11))
	return &MLSeed{cfg: cfg, period: float64(period), net: newLSTM(cfg.Hidden, rng), rng: rng}
}

// Observe implements Detector.
func (m *MLSeed) Observe(seq uint64, arrival int64) {
	if m.seen && seq <= m.lastSeq {
		return
	}
	r := float64(arrival) - m.period*float64(seq)
	if !m.seen {
		m.mean = r
	}
	if m.seen {
		e := math.Abs(r - m.pred)
		m.errs = append(m.errs, e)
		if len(m.errs) > m.cfg.Epsilon {
			m.errs = m.errs[1:]
		}
	}
	m.seen, m.lastSeq = true, seq
	m.resid = append(m.resid, (r-m.mean)/m.period)
	if len(m.resid) > m.cfg.Eta {
		m.resid = m.resid[1:]
	}
	m.n++
	if len(m.resid) > m.cfg.Seq+1 && m.n%m.cfg.RetrainEvery == 0 {
		m.train()
	}
	if len(m.resid) >= m.cfg.Seq {
		m.pred = m.mean + m.net.predict(m.resid[len(m.resid)-m.cfg.Seq:])*m.period
	} else {
		m.pred = r
	}
}

// train runs the configured epochs of mini-batch Adam over the window.
func (m *MLSeed) train() {
	n := len(m.resid) - m.cfg.Seq
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	for range m.cfg.Epochs {
		m.rng.Shuffle(n, func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		for b := 0; b < n; b += m.cfg.Batch {
			end := min(b+m.cfg.Batch, n)
			m.net.zeroGrad()
			for _, i := range idx[b:end] {
				x := m.resid[i : i+m.cfg.Seq]
				y := m.resid[i+m.cfg.Seq]
				m.net.backward(x, y, m.cfg.EarlyPenalty)
			}
			m.net.adam(m.cfg.LearningRate, float64(end-b))
		}
	}
}

// Freshness implements Detector.
func (m *MLSeed) Freshness() int64 {
	margin := 0.0
	for _, e := range m.errs {
		margin += e
	}
	if len(m.errs) > 0 {
		margin /= float64(len(m.errs))
	}
	return int64(m.period*float64(m.lastSeq+1) + m.pred + margin)
}

// lstm is a one-layer LSTM with a linear read-out, trained by BPTT.
type lstm struct {
	h int
	// Gate weights: rows [i; f; o; g] (4h), columns [x, h_prev..., 1].
	w, gw, m1, m2 []float64
	// Read-out y = v·h + c.
	v, gv, vm1, vm2 []float64
	c, gc, cm1, cm2 float64
	t               int
	// Scratch, per time step.
	hs, cs, gates [][]float64
}

func newLSTM(h int, rng *rand.Rand) *lstm {
	cols := 1 + h + 1
	n := 4 * h * cols
	l := &lstm{h: h, w: make([]float64, n), gw: make([]float64, n), m1: make([]float64, n), m2: make([]float64, n),
		v: make([]float64, h), gv: make([]float64, h), vm1: make([]float64, h), vm2: make([]float64, h)}
	scale := 1 / math.Sqrt(float64(cols))
	for i := range l.w {
		l.w[i] = (rng.Float64()*2 - 1) * scale
	}
	for j := range h { // forget-gate bias 1: remember by default
		l.w[(h+j)*cols+cols-1] = 1
	}
	for i := range l.v {
		l.v[i] = (rng.Float64()*2 - 1) * scale
	}
	return l
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// forward runs the sequence and keeps the states for backward.
func (l *lstm) forward(x []float64) float64 {
	h, cols := l.h, 1+l.h+1
	T := len(x)
	if len(l.hs) < T+1 {
		l.hs, l.cs, l.gates = make([][]float64, T+1), make([][]float64, T+1), make([][]float64, T)
		for t := range T + 1 {
			l.hs[t], l.cs[t] = make([]float64, h), make([]float64, h)
			if t < T {
				l.gates[t] = make([]float64, 4*h)
			}
		}
	}
	clear(l.hs[0])
	clear(l.cs[0])
	for t := range T {
		hp, cp, g := l.hs[t], l.cs[t], l.gates[t]
		for r := range 4 * h {
			row := l.w[r*cols : (r+1)*cols]
			s := row[0]*x[t] + row[cols-1]
			for j := range h {
				s += row[1+j] * hp[j]
			}
			if r < 3*h {
				g[r] = sigmoid(s)
			} else {
				g[r] = math.Tanh(s)
			}
		}
		hn, cn := l.hs[t+1], l.cs[t+1]
		for j := range h {
			cn[j] = g[h+j]*cp[j] + g[j]*g[3*h+j]
			hn[j] = g[2*h+j] * math.Tanh(cn[j])
		}
	}
	y := l.c
	for j := range h {
		y += l.v[j] * l.hs[T][j]
	}
	return y
}

func (l *lstm) predict(x []float64) float64 { return l.forward(x) }

func (l *lstm) zeroGrad() {
	clear(l.gw)
	clear(l.gv)
	l.gc = 0
}

// backward accumulates the gradient of the asymmetric squared loss.
func (l *lstm) backward(x []float64, target, penalty float64) {
	y := l.forward(x)
	h, cols, T := l.h, 1+l.h+1, len(x)
	dy := 2 * (y - target)
	if y < target {
		dy *= penalty // early prediction: the heartbeat came later
	}
	l.gc += dy
	dh := make([]float64, h)
	dc := make([]float64, h)
	for j := range h {
		l.gv[j] += dy * l.hs[T][j]
		dh[j] = dy * l.v[j]
	}
	dgate := make([]float64, 4*h)
	for t := T - 1; t >= 0; t-- {
		g, cp, cn := l.gates[t], l.cs[t], l.cs[t+1]
		for j := range h {
			tc := math.Tanh(cn[j])
			do := dh[j] * tc
			dcj := dc[j] + dh[j]*g[2*h+j]*(1-tc*tc)
			di := dcj * g[3*h+j]
			df := dcj * cp[j]
			dg := dcj * g[j]
			dgate[j] = di * g[j] * (1 - g[j])
			dgate[h+j] = df * g[h+j] * (1 - g[h+j])
			dgate[2*h+j] = do * g[2*h+j] * (1 - g[2*h+j])
			dgate[3*h+j] = dg * (1 - g[3*h+j]*g[3*h+j])
			dc[j] = dcj * g[h+j]
		}
		hp := l.hs[t]
		clear(dh)
		for r := range 4 * h {
			d := dgate[r]
			if d == 0 {
				continue
			}
			row := l.w[r*cols : (r+1)*cols]
			grow := l.gw[r*cols : (r+1)*cols]
			grow[0] += d * x[t]
			grow[cols-1] += d
			for j := range h {
				grow[1+j] += d * hp[j]
				dh[j] += d * row[1+j]
			}
		}
	}
}

// adam applies one Adam step with the gradient averaged over n samples.
func (l *lstm) adam(lr, n float64) {
	const b1, b2, eps = 0.9, 0.999, 1e-8
	l.t++
	c1, c2 := 1-math.Pow(b1, float64(l.t)), 1-math.Pow(b2, float64(l.t))
	step := func(w, g, m, v []float64) {
		for i := range w {
			gi := g[i] / n
			m[i] = b1*m[i] + (1-b1)*gi
			v[i] = b2*v[i] + (1-b2)*gi*gi
			w[i] -= lr * (m[i] / c1) / (math.Sqrt(v[i]/c2) + eps)
		}
	}
	step(l.w, l.gw, l.m1, l.m2)
	step(l.v, l.gv, l.vm1, l.vm2)
	gc := l.gc / n
	l.cm1 = b1*l.cm1 + (1-b1)*gc
	l.cm2 = b2*l.cm2 + (1-b2)*gc*gc
	l.c -= lr * (l.cm1 / c1) / (math.Sqrt(l.cm2/c2) + eps)
}
