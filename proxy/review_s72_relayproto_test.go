package proxy

import (
	"strings"
	"testing"

	"github.com/edgecache/edge/rules"
	"go.yaml.in/yaml/v3"
)

func s72YAML(t *testing.T, src string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// Review s72: a rule that removed X-Forwarded-Proto (config check
// accepted it; an operator drops a field the origin should not trust, or
// copies nginx's proxy_set_header X-Forwarded-Proto "") left the scheme to
// the connection at a single node, but in a cluster it removed the
// ingress's field from every relayed request, so the home told the
// origin http (a force-https origin's redirect to the page itself, a loop
// on the cluster that one node did not have) and keyed the request http
// where its peer hit path keyed it https. Such rules are now refused at
// load (rules.checkForwardedProto): a rule may set the field to http or
// https, which both nodes then read the same way (Handler.scheme).
func TestS72RuleRemovingForwardedProtoIsRefused(t *testing.T) {
	for _, tc := range []struct{ yaml, key string }{
		{`[{name: pages, request_headers: {remove: [X-Forwarded-Proto]}}]`, "request_headers.remove"},
		{`[{name: pages, request_headers: {remove: [x-forwarded-proto]}}]`, "request_headers.remove"},
		{`[{name: pages, request_headers: {set: {X-Forwarded-Proto: ""}}}]`, "request_headers.set.X-Forwarded-Proto"},
		{`[{name: pages, request_headers: {set: {X-Forwarded-Proto: "https, http"}}}]`, "request_headers.set.X-Forwarded-Proto"},
	} {
		_, err := rules.Parse("rules", s72YAML(t, tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: %v, want an error naming %s", tc.yaml, err, tc.key)
		}
	}
	for _, ok := range []string{
		`[{name: pages, request_headers: {set: {X-Forwarded-Proto: https}}}]`,
		`[{name: pages, request_headers: {set: {X-Forwarded-Proto: HTTP}}}]`,
	} {
		if _, err := rules.Parse("rules", s72YAML(t, ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
