package fdlab

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Arrival is one received heartbeat: a row of a trace file.
type Arrival struct {
	Site string
	Seq  uint64
	Send int64 // sender clock, ns
	Recv int64 // receiver clock, ns
	// Delay is the one-way delay (ns) when known: generated traces know it;
	// with unsynchronised clocks a recorded one does not (0). Only Chen's
	// T_D uses it.
	Delay int64
}

// TraceHeader is the first line of a trace CSV; TraceHeaderDelay that of a
// trace that also knows each heartbeat's one-way delay.
const (
	TraceHeader      = "site,seq,send_ns,recv_ns"
	TraceHeaderDelay = TraceHeader + ",delay_ns"
)

// WriteTrace writes arrivals as CSV, with the delay column if any arrival
// has a delay.
func WriteTrace(w io.Writer, as []Arrival) error {
	bw := bufio.NewWriter(w)
	withDelay := false
	for _, a := range as {
		withDelay = withDelay || a.Delay != 0
	}
	if !withDelay {
		fmt.Fprintln(bw, TraceHeader)
		for _, a := range as {
			fmt.Fprintf(bw, "%s,%d,%d,%d\n", a.Site, a.Seq, a.Send, a.Recv)
		}
		return bw.Flush()
	}
	fmt.Fprintln(bw, TraceHeaderDelay)
	for _, a := range as {
		fmt.Fprintf(bw, "%s,%d,%d,%d,%d\n", a.Site, a.Seq, a.Send, a.Recv, a.Delay)
	}
	return bw.Flush()
}

// ReadTrace reads a trace CSV. A malformed row is an error naming its line.
func ReadTrace(r io.Reader) ([]Arrival, error) {
	var out []Arrival
	fields := 4
	header := func(h string) error {
		switch h {
		case TraceHeader:
		case TraceHeaderDelay:
			fields = 5
		default:
			return fmt.Errorf("header %q, want %q or %q", h, TraceHeader, TraceHeaderDelay)
		}
		return nil
	}
	lines, err := readRows(r, "trace", header, func(f []string) error {
		if len(f) != fields {
			return fmt.Errorf("%d fields, want %d as the header says", len(f), fields)
		}
		if f[0] == "" {
			return errors.New("empty site")
		}
		seq, err1 := strconv.ParseUint(f[1], 10, 64)
		send, err2 := strconv.ParseInt(f[2], 10, 64)
		recv, err3 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return errors.New("seq, send_ns and recv_ns must be integers")
		}
		a := Arrival{Site: f[0], Seq: seq, Send: send, Recv: recv}
		if fields == 5 {
			d, err := strconv.ParseInt(f[4], 10, 64)
			if err != nil || d < 0 {
				return errors.New("delay_ns must be a non-negative integer")
			}
			a.Delay = d
		}
		out = append(out, a)
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case lines == 0:
		return nil, fmt.Errorf("fdlab: trace is empty")
	case len(out) == 0:
		return nil, fmt.Errorf("fdlab: trace has a header and no heartbeats")
	}
	return out, nil
}

// readRows reads the lab's CSV files a line at a time: header checks the
// first line, row takes the fields of every other line that is not blank
// (spaces around a line trimmed). An error of either, or of reading, is
// returned naming the file's kind (what) and the line; lines is how many
// were read.
func readRows(r io.Reader, what string, header func(string) error, row func(fields []string) error) (lines int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines++
		s := strings.TrimSpace(sc.Text())
		switch {
		case lines == 1:
			err = header(s)
		case s == "":
			continue
		default:
			err = row(strings.Split(s, ","))
		}
		if err != nil {
			return lines, fmt.Errorf("fdlab: %s line %d: %w", what, lines, err)
		}
	}
	if err := sc.Err(); err != nil {
		return lines, fmt.Errorf("fdlab: %s line %d: %w", what, lines+1, err)
	}
	return lines, nil
}

// GenConfig configures a synthetic WAN heartbeat trace. DefaultGenConfig
// documents why each value.
type GenConfig struct {
	Seed     uint64
	Duration time.Duration
	Period   time.Duration
	Links    int
	// Base one-way delay and its regime shifts.
	BaseDelay     time.Duration // typical WAN one-way delay
	ShiftEvery    time.Duration // mean time between delay regime shifts
	ShiftMax      time.Duration // a new regime's base delay is up to this much higher
	JitterScale   time.Duration // Pareto jitter scale
	JitterShape   float64       // Pareto shape (smaller: heavier tail)
	QueueMean     time.Duration // mean queueing delay, an AR(1) process per link
	QueueStd      time.Duration // its stationary standard deviation
	QueueRho      float64       // its correlation from one heartbeat to the next (0: no queueing component)
	StallEvery    time.Duration // mean time between sender stalls
	StallMin      time.Duration
	StallMax      time.Duration
	LossGood      float64 // Gilbert–Elliott: loss probability in the good state
	LossBad       float64 // in the bad state
	GoodToBad     float64 // per-heartbeat transition probabilities
	BadToGood     float64
	DriftPPM      float64 // receiver clock drift relative to the sender, ±
	SkewMax       time.Duration
	HeartbeatCost time.Duration // unused by detectors; documents the sender's work
	// Sender is how the sender keeps time: SenderTick (a ticker: heartbeat
	// s leaves at s·Δ, and those due during a stall leave together when it
	// ends) or SenderSleep (it sleeps Δ after each send and wakes
	// SenderJitter late on average, so its send times are a random walk
	// that drifts away from s·Δ, and a stall delays every later heartbeat:
	// no burst, a new phase). PlanetLab's heartbeat senders were of the
	// second kind; a Go ticker is of the first.
	Sender       string
	SenderJitter time.Duration // mean wake-up lateness of a sleeping sender (exponential)
	// SendTimes, when set, are real senders' heartbeats, one link each
	// (ReadSendTimes: the PlanetLab senders of the failure detector
	// benchmark platform): each link sends when its sender did, from its
	// first heartbeat on, and skips the numbers it never sent. Links,
	// Sender and the stalls are then unused (the files hold the senders'
	// own stalls); Duration, if positive, cuts each link there. The WAN
	// (delay, loss, clocks) is modelled as without them.
	SendTimes [][]SendTime
}

// The sender kinds of GenConfig.Sender.
const (
	SenderTick  = "tick"
	SenderSleep = "sleep"
)

// DefaultGenConfig returns the defaults: a PlanetLab-like WAN.
func DefaultGenConfig() GenConfig {
	return GenConfig{
		Seed: 1, Duration: 30 * time.Minute, Period: 100 * time.Millisecond, Links: 4,
		BaseDelay:   40 * time.Millisecond,  // transcontinental one-way delay
		ShiftEvery:  5 * time.Minute,        // route changes every few minutes
		ShiftMax:    60 * time.Millisecond,  // a reroute adds up to 60 ms
		JitterScale: 500 * time.Microsecond, // per-packet noise
		JitterShape: 1.5,                    // heavy tail: rare delays of tens to hundreds of ms
		QueueMean:   20 * time.Millisecond,  // congestion builds queues of tens of ms
		QueueStd:    15 * time.Millisecond,
		QueueRho:    0.98,                   // a queue drains over seconds (time constant 50 periods), so delay is autocorrelated
		StallEvery:  3 * time.Minute,        // GC or VM pauses of the sending process
		StallMin:    300 * time.Millisecond, // the range of real WAN host stalls
		StallMax:    1300 * time.Millisecond,
		LossGood:    0.001, LossBad: 0.3, // Gilbert–Elliott: rare loss, then bursts
		GoodToBad: 0.0005, BadToGood: 0.1, // bursts of ~10 heartbeats, a few per hour
		DriftPPM: 50, // ordinary crystal oscillators
		SkewMax:  time.Second,
		Sender:   SenderTick, // edge's own sender is a Go ticker
		// A sleeping sender on a busy host wakes a few ms late (used only
		// with Sender sleep).
		SenderJitter: 2 * time.Millisecond,
	}
}

// Generate makes a trace: every link sends a heartbeat each period (late
// after a stall: the heartbeats due during a stall leave together when it
// ends), delays are a regime base plus Pareto jitter, losses follow a
// Gilbert–Elliott chain, and the receiver's clock drifts and is offset.
func Generate(c GenConfig) ([]Arrival, error) {
	if len(c.SendTimes) > 0 {
		c.Links = len(c.SendTimes)
		for i, st := range c.SendTimes {
			if len(st) < 2 {
				return nil, fmt.Errorf("fdlab: gen send times of link %d: %d heartbeats, want at least 2", i+1, len(st))
			}
			// Receive times add delays to the sends: a span near 2^63 ns
			// (a hostile or broken file) would wrap them.
			if span := st[len(st)-1].Send - st[0].Send; span > maxSendSpan {
				return nil, fmt.Errorf("fdlab: gen send times of link %d span %v: at most %v", i+1, time.Duration(span), time.Duration(maxSendSpan))
			}
		}
		if c.Duration <= 0 {
			c.Duration = math.MaxInt64 // each file whole
		}
	}
	if c.Period <= 0 || c.Duration < c.Period || c.Links < 1 || !(c.JitterShape > 0 && c.JitterShape <= 1e6) || !(c.QueueRho >= 0 && c.QueueRho < 1) {
		return nil, fmt.Errorf("fdlab: gen needs period > 0, duration ≥ period, links ≥ 1, jitter shape in (0, 1e6], 0 ≤ queue-rho < 1")
	}
	// NaN fails every comparison, so each check is written to pass only a
	// good value: --jitter-shape NaN once wrote a receive time of −2^63,
	// and a negative jitter heartbeats received before they were sent.
	type chance struct {
		name string
		v    float64
	}
	for _, p := range []chance{{"loss-good", c.LossGood}, {"loss-bad", c.LossBad}, {"good-to-bad", c.GoodToBad}, {"bad-to-good", c.BadToGood}} {
		if !(p.v >= 0 && p.v <= 1) {
			return nil, fmt.Errorf("fdlab: gen %s %v: want a chance in [0, 1]", p.name, p.v)
		}
	}
	if !(c.DriftPPM >= 0 && c.DriftPPM <= 1e5) {
		return nil, fmt.Errorf("fdlab: gen drift %v ppm: want [0, 1e5]", c.DriftPPM)
	}
	type span struct {
		name string
		d    time.Duration
	}
	for _, p := range []span{{"base-delay", c.BaseDelay}, {"shift-every", c.ShiftEvery}, {"shift-max", c.ShiftMax}, {"jitter", c.JitterScale},
		{"queue-mean", c.QueueMean}, {"queue-std", c.QueueStd}, {"stall-every", c.StallEvery}, {"stall-min", c.StallMin}, {"stall-max", c.StallMax}, {"skew", c.SkewMax}} {
		if p.d < 0 {
			return nil, fmt.Errorf("fdlab: gen %s %v: want a duration ≥ 0", p.name, p.d)
		}
	}
	if c.StallMax < c.StallMin {
		return nil, fmt.Errorf("fdlab: gen stall-max %v below stall-min %v", c.StallMax, c.StallMin)
	}
	if c.Sender == "" {
		c.Sender = SenderTick
	}
	if (c.Sender != SenderTick && c.Sender != SenderSleep) || c.SenderJitter < 0 {
		return nil, fmt.Errorf("fdlab: gen sender %q: want %s or %s, and sender jitter ≥ 0", c.Sender, SenderTick, SenderSleep)
	}
	sleeping := c.Sender == SenderSleep
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed^0xfdfdfd))
	var out []Arrival
	n := int(c.Duration / c.Period)
	P := float64(c.Period)
	for l := range c.Links {
		site := "link" + strconv.Itoa(l+1)
		drift := (rng.Float64()*2 - 1) * c.DriftPPM * 1e-6
		skew := (rng.Float64()*2 - 1) * float64(c.SkewMax)
		base := float64(c.BaseDelay) * (0.5 + rng.Float64())
		nextShift := expo(rng, float64(c.ShiftEvery))
		nextStall := expo(rng, float64(c.StallEvery))
		stallEnd := -1.0
		bad := false
		queue := float64(c.QueueMean)
		qNoise := float64(c.QueueStd) * math.Sqrt(1-c.QueueRho*c.QueueRho)
		var link []Arrival
		prevSend := -P
		beats := n
		var real []SendTime // this link's sender's own heartbeats, if given
		if len(c.SendTimes) > 0 {
			real = c.SendTimes[l]
			beats = len(real)
		}
		for s := range beats {
			t := float64(s) * P // scheduled send time
			seq := uint64(s)
			if real != nil {
				t, seq = float64(real[s].Send-real[0].Send), real[s].Seq-real[0].Seq
				if t >= float64(c.Duration) {
					break
				}
			} else if sleeping {
				// It wakes a period after its last send, a little late.
				t = prevSend + P + expo(rng, float64(c.SenderJitter))
			}
			if t >= nextShift {
				base = float64(c.BaseDelay)*(0.5+rng.Float64()) + rng.Float64()*float64(c.ShiftMax)
				nextShift = t + expo(rng, float64(c.ShiftEvery))
			}
			if real == nil && t >= nextStall && stallEnd < t {
				stallEnd = t + float64(c.StallMin) + rng.Float64()*float64(c.StallMax-c.StallMin)
				nextStall = stallEnd + expo(rng, float64(c.StallEvery))
			}
			send := t
			if t < stallEnd {
				send = stallEnd
			}
			prevSend = send
			if c.QueueRho > 0 {
				queue = math.Max(0, c.QueueRho*queue+(1-c.QueueRho)*float64(c.QueueMean)+qNoise*rng.NormFloat64())
			}
			if bad {
				bad = rng.Float64() >= c.BadToGood
			} else {
				bad = rng.Float64() < c.GoodToBad
			}
			loss := c.LossGood
			if bad {
				loss = c.LossBad
			}
			if rng.Float64() < loss {
				continue
			}
			jitter := float64(c.JitterScale) * (math.Pow(1-rng.Float64(), -1/c.JitterShape) - 1)
			arrive := send + base + jitter + queue
			recv := arrive*(1+drift) + skew
			link = append(link, Arrival{Site: site, Seq: seq, Send: int64(send), Recv: int64(recv), Delay: int64(arrive - send)})
		}
		sort.SliceStable(link, func(i, j int) bool { return link[i].Recv < link[j].Recv })
		out = append(out, link...)
	}
	return out, nil
}

func expo(rng *rand.Rand, mean float64) float64 { return rng.ExpFloat64() * mean }

// SendTime is one heartbeat a real sender sent: a row of the failure
// detector benchmark platform's sentinterval.csv (PlanetLab senders).
type SendTime struct {
	Seq  uint64
	Send int64 // the sender's clock when it began to send, ns
}

// maxSendSpan bounds the time a link's real send times cover (about 2.3
// years; PlanetLab's runs were days), far from int64's end so that no
// modelled delay or clock skew can wrap a receive time.
const maxSendSpan = int64(1) << 56

// SendTimesHeader is the first line of a sentinterval.csv.
const SendTimesHeader = "numseq,timestamp_start_send,timestamp_end_send"

// ReadSendTimes reads a sentinterval.csv: numseq, and the sender's clock
// (ns) when it began and ended each send. Sequence numbers must rise (a
// gap is a heartbeat the sender never sent) and the clock must not run
// back; a malformed row is an error naming its line.
func ReadSendTimes(r io.Reader) ([]SendTime, error) {
	var out []SendTime
	header := func(h string) error {
		if h != SendTimesHeader {
			return fmt.Errorf("header %q, want %q", h, SendTimesHeader)
		}
		return nil
	}
	lines, err := readRows(r, "send times", header, func(f []string) error {
		if len(f) != 3 {
			return fmt.Errorf("%d fields, want 3", len(f))
		}
		seq, err1 := strconv.ParseUint(f[0], 10, 64)
		start, err2 := strconv.ParseInt(f[1], 10, 64)
		end, err3 := strconv.ParseInt(f[2], 10, 64)
		switch {
		case err1 != nil || err2 != nil || err3 != nil:
			return errors.New("numseq and both timestamps must be integers")
		case start < 0 || end < start:
			return fmt.Errorf("a send must end (%d) no earlier than it began (%d), at a time ≥ 0", end, start)
		}
		if n := len(out); n > 0 {
			switch prev := out[n-1]; {
			case seq <= prev.Seq:
				return fmt.Errorf("numseq %d after %d: it must rise", seq, prev.Seq)
			case start < prev.Send:
				return fmt.Errorf("the clock ran back (%d after %d)", start, prev.Send)
			}
		}
		out = append(out, SendTime{Seq: seq, Send: start})
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case lines == 0:
		return nil, fmt.Errorf("fdlab: send times file is empty")
	case len(out) < 2:
		return nil, fmt.Errorf("fdlab: send times: %d heartbeats, want at least 2", len(out))
	}
	return out, nil
}
