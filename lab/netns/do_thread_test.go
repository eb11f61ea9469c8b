package netns

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// Host.Do restores the thread's namespace only on fn's normal return: if
// fn panics and a caller up the stack recovers, the goroutine goes on,
// still locked to a thread that is still inside the host's namespace, and
// every socket it opens from then on is opened there.
func TestDoPanicLeavesThreadInHost(t *testing.T) {
	l := newLab(t, "a")
	h := l.Host("a")
	root, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	hostNS, _ := os.Readlink("/var/run/netns/" + h.NS)
	_ = hostNS
	got := make(chan string, 1)
	go func() {
		func() {
			defer func() { _ = recover() }()
			_ = h.Do(func() error { panic("boom") })
		}()
		ns, _ := os.Readlink(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		got <- ns
	}()
	if ns := <-got; ns != root {
		t.Errorf("after a recovered panic in Do the goroutine runs in %s, not the process's namespace %s", ns, root)
	}
}
