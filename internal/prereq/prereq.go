// Package prereq decides what a test does when something it needs from
// the machine is missing (a browser, root for network namespaces, a
// tmpfs mount, the shared traces). `make test` sets EDGE_REQUIRE_PREREQS=1,
// and installs everything it can first: there a missing prerequisite fails
// the test loudly, so that a green run means the test ran. A developer's
// plain `go test` skips instead, saying what is missing.
package prereq

import (
	"os"
	"testing"
)

// Env is the variable that makes a missing prerequisite a failure.
const Env = "EDGE_REQUIRE_PREREQS"

// Missing ends the test because what (with the reason err) is not there:
// a failure under `make test`, a skip elsewhere.
func Missing(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv(Env) != "" {
		t.Fatalf("prerequisite missing: %s: %v (%s is set: make test needs it; see scripts/test-deps.sh)", what, err, Env)
	}
	t.Skipf("prerequisite missing: %s: %v (set %s=1 to make this a failure, as make test does)", what, err, Env)
}
