package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestDroppedFieldsCountClientsOnly: edge_request_fields_total{action=
// "dropped"} counts the fields clients sent that are never forwarded, not
// the peer protocol's own fields on a request a peer relayed (the ingress
// dropped its client's before relaying). Before, every peer hop added a
// dozen, and the status page showed thousands of "dropped client fields"
// in a demo no client sent one to (a new user's walk-through).
func TestDroppedFieldsCountClientsOnly(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = w.Write([]byte("ok"))
	}, nil)
	dropped := func() float64 { return testutil.ToFloat64(h.metrics.fieldDropped) }
	relayed := httptest.NewRequest("GET", "http://a.test/p", nil)
	for _, f := range []string{"Edge-Route", "Edge-Nonce", "Edge-Auth", "Edge-To", "Edge-Site"} {
		relayed.Header.Set(f, "x")
	}
	h.ServeInbound(httptest.NewRecorder(), relayed, Inbound{Relayed: true})
	if got := dropped(); got != 0 {
		t.Fatalf("a relayed request's protocol fields counted as %v dropped client fields", got)
	}
	client := httptest.NewRequest("GET", "http://a.test/p", nil)
	client.Header.Set("X_Bad", "1")
	client.Header.Set("Edge-Route", "forged") // a client's: counted
	h.ServeHTTP(httptest.NewRecorder(), client)
	if got := dropped(); got != 2 {
		t.Fatalf("a client's two dropped fields counted %v times", got)
	}
}
