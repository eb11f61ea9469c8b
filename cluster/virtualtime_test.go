package cluster

import (
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
)

// virtualTime runs f in a synctest bubble: the tests that play minutes of
// heartbeats, gossip and failures in virtual time.
//
// Under the race detector it skips them: synctest bubbles can crash the race
// runtime itself ("ThreadSanitizer: CHECK failed: tsan_rtl.cpp:346", open as
// golang/go#78156; it failed CI once in TestFlappingNodeIsNotDeclaredDead's
// run on Go 1.26.8), a failure of the tool, not of the code under test. The
// cluster's concurrency stays under the race detector in every real-time
// test; `make test` runs these without it (the virtual-time target). Each
// must be named in the Makefile's VIRTUAL_TIME_TESTS, which the race run
// passes as EDGE_VIRTUAL_TIME_TESTS: a test missing from it fails there
// instead of running nowhere.
func virtualTime(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if raceDetector {
		if list := os.Getenv("EDGE_VIRTUAL_TIME_TESTS"); list != "" {
			top, _, _ := strings.Cut(t.Name(), "/")
			if ok, err := regexp.MatchString("^("+list+")$", top); err != nil || !ok {
				t.Fatalf("%s runs in virtual time but is not in the Makefile's VIRTUAL_TIME_TESTS (%v): under -race it is skipped, so add it there to run it at all", top, err)
			}
		}
		t.Skip("virtual time (synctest) is run without the race detector: golang/go#78156 crashes the race runtime")
	}
	top, _, _ := strings.Cut(t.Name(), "/")
	virtualTests.Store(top, true)
	defer virtualTests.Delete(top)
	synctest.Test(t, f)
}

// virtualTests holds the top-level names of the tests running in virtual
// time now: their nodes leave the real run-queue latency out of their own
// delay (Config.runQueueBlind).
var virtualTests sync.Map

// inVirtualTime reports whether t (or the test it is a subtest of) runs
// in virtual time.
func inVirtualTime(t testing.TB) bool {
	top, _, _ := strings.Cut(t.Name(), "/")
	_, ok := virtualTests.Load(top)
	return ok
}
