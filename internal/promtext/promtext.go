// Package promtext reads a Prometheus text exposition into flat samples
// for the tests and scripts that check a running node's metrics. It parses
// with the Prometheus project's own parser (expfmt) and names each sample
// as the exposition does: name{label="value",…}, with _bucket{le=…},
// _sum and _count for histograms and summaries.
package promtext

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Parse reads an exposition into samples keyed by series.
func Parse(r io.Reader) (out map[string]float64, err error) {
	defer func() {
		// expfmt's TextParser (prometheus/common v0.71) dereferences nil
		// on "# TYPE A histogram" followed by a line that starts with "{"
		// (FuzzParse found it: testdata/fuzz/FuzzParse). Malformed input
		// is an error here, never a crash of the test or script reading it.
		if v := recover(); v != nil {
			out, err = nil, fmt.Errorf("promtext: the exposition parser failed on malformed input: %v", v)
		}
	}()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("promtext: %w", err)
	}
	out = map[string]float64{}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := labelPairs(m.GetLabel())
			switch {
			case m.Counter != nil:
				out[series(name, labels)] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[series(name, labels)] = m.GetGauge().GetValue()
			case m.Untyped != nil:
				out[series(name, labels)] = m.GetUntyped().GetValue()
			case m.Histogram != nil:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					out[series(name+"_bucket", append(slices.Clone(labels), [2]string{"le", formatBound(b.GetUpperBound())}))] = float64(b.GetCumulativeCount())
				}
				out[series(name+"_bucket", append(slices.Clone(labels), [2]string{"le", "+Inf"}))] = float64(h.GetSampleCount())
				out[series(name+"_sum", labels)] = h.GetSampleSum()
				out[series(name+"_count", labels)] = float64(h.GetSampleCount())
			case m.Summary != nil:
				s := m.GetSummary()
				out[series(name+"_sum", labels)] = s.GetSampleSum()
				out[series(name+"_count", labels)] = float64(s.GetSampleCount())
			}
		}
	}
	return out, nil
}

// Scrape fetches and parses url.
func Scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("promtext: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("promtext: %w", err)
	}
	defer resp.Body.Close()
	return Parse(resp.Body)
}

// First returns the value of the first series, in name order, that starts
// with prefix, and whether there was one.
func First(samples map[string]float64, prefix string) (float64, bool) {
	var keys []string
	for k := range samples {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return 0, false
	}
	slices.Sort(keys)
	return samples[keys[0]], true
}

func labelPairs(ls []*dto.LabelPair) [][2]string {
	out := make([][2]string, 0, len(ls))
	for _, l := range ls {
		out = append(out, [2]string{l.GetName(), l.GetValue()})
	}
	return out
}

func series(name string, labels [][2]string) string {
	if len(labels) == 0 {
		return name
	}
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, l := range labels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l[0])
		b.WriteString(`="`)
		b.WriteString(l[1])
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func formatBound(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
