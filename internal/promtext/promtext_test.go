package promtext

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := `# HELP edge_peer_up Peer state.
# TYPE edge_peer_up gauge
edge_peer_up{peer="edge-2"} 1
edge_peer_up{peer="edge-5"} 0
# TYPE edge_requests_total counter
edge_requests_total{result="hit"} 42
# TYPE edge_origin_fetches_per_page histogram
edge_origin_fetches_per_page_bucket{le="1"} 7
edge_origin_fetches_per_page_bucket{le="2"} 9
edge_origin_fetches_per_page_bucket{le="+Inf"} 9
edge_origin_fetches_per_page_sum 11
edge_origin_fetches_per_page_count 9
`
	s, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]float64{
		`edge_peer_up{peer="edge-5"}`: 0, `edge_requests_total{result="hit"}`: 42,
		`edge_origin_fetches_per_page_bucket{le="1"}`: 7, "edge_origin_fetches_per_page_count": 9,
	} {
		if got, ok := s[k]; !ok || got != want {
			t.Errorf("%s = %v (%v), want %v", k, got, ok, want)
		}
	}
	if v, ok := First(s, "edge_peer_up"); !ok || v != 1 {
		t.Errorf("First = %v, %v", v, ok)
	}
	if _, err := Parse(strings.NewReader("edge_x{ 1\n")); err == nil {
		t.Error("malformed exposition accepted")
	}
	// expfmt panics on this one (FuzzParse): an error, not a crash.
	if _, err := Parse(strings.NewReader("#TYPE A histogrAm\n{}")); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("a histogram's labels without a name: %v, want an error", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("a 1\n")
	f.Add("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_count 1\nh_sum 1\n")
	f.Fuzz(func(t *testing.T, in string) {
		_, _ = Parse(strings.NewReader(in)) // never panics
	})
}
