// Package netns builds a small network of Linux network namespaces for the
// fault lab: one namespace per host, each joined by a veth pair to a bridge
// in a hub namespace, with addresses in a private range that exists only
// inside those namespaces. Processes run inside a host with
// `ip netns exec`; the lab's own sockets (relays, probes of admin pages)
// are opened inside a host from a goroutine pinned to a thread that has
// entered the namespace, since a socket stays in the namespace it was
// created in.
//
// Firewall faults (partitions, one-way partitions, kernel-level packet
// loss) are nftables rule sets loaded into a host's namespace.
//
// iproute2 and nftables do the work; no maintained Go library wraps both
// with the cleanup guarantees a test lab needs (every namespace it makes is
// removed, also after a crash of an earlier run), so this is hand-written
// and small.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Check reports why a lab cannot run here: not root, no `ip` or `nft`, or
// namespaces not permitted. nil means it can.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("netns: the fault lab needs root (network namespaces, veth pairs, nftables)")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("netns: %s not found (Debian packages iproute2 and nftables): %w", tool, err)
		}
	}
	name := fmt.Sprintf("edgechk%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("netns: namespaces not permitted here: %s: %w", bytes.TrimSpace(out), err)
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	return nil
}

// Lab is a set of hosts on one bridge.
type Lab struct {
	prefix string
	hub    string
	hosts  []*Host
}

// Host is one namespace with one address on the lab's bridge.
type Host struct {
	Name string     // the caller's name for it
	NS   string     // the namespace's name
	Addr netip.Addr // its address on the bridge
}

// subnet is the lab's address range: from TEST-NET-2 (RFC 5737), which no
// real network routes, so a misconfigured lab can reach nothing outside.
var subnet = netip.MustParsePrefix("198.51.100.0/24")

// New creates the hub namespace and one host per name, at 198.51.100.1,
// .2, … in order. prefix names everything it makes (at most 10 characters,
// so that interface names fit 15); namespaces left by an earlier run with
// the same prefix are removed first.
func New(ctx context.Context, prefix string, names []string) (*Lab, error) {
	if len(prefix) == 0 || len(prefix) > 10 || strings.ContainsAny(prefix, " /-") {
		return nil, fmt.Errorf("netns: prefix %q: 1–10 characters without spaces, / or -", prefix)
	}
	if len(names) == 0 || len(names) > 250 {
		return nil, fmt.Errorf("netns: %d hosts: 1–250", len(names))
	}
	Sweep(prefix)
	l := &Lab{prefix: prefix, hub: prefix + "-hub"}
	fail := func(err error) (*Lab, error) {
		l.Close()
		return nil, err
	}
	if err := run(ctx, "ip", "netns", "add", l.hub); err != nil {
		return fail(err)
	}
	if err := l.hubRun(ctx, "ip", "link", "add", "br0", "type", "bridge"); err != nil {
		return fail(err)
	}
	if err := l.hubRun(ctx, "ip", "link", "set", "br0", "up"); err != nil {
		return fail(err)
	}
	addr := subnet.Addr()
	for i, name := range names {
		addr = addr.Next()
		h := &Host{Name: name, NS: fmt.Sprintf("%s-%d", prefix, i+1), Addr: addr}
		l.hosts = append(l.hosts, h)
		outer := fmt.Sprintf("%sv%d", prefix, i+1)
		steps := [][]string{
			{"ip", "netns", "add", h.NS},
			{"ip", "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
			{"ip", "link", "set", outer, "netns", l.hub},
			{"ip", "-n", l.hub, "link", "set", outer, "master", "br0"},
			{"ip", "-n", l.hub, "link", "set", outer, "up"},
			{"ip", "-n", h.NS, "addr", "add", fmt.Sprintf("%s/%d", addr, subnet.Bits()), "dev", "eth0"},
			{"ip", "-n", h.NS, "link", "set", "eth0", "up"},
			{"ip", "-n", h.NS, "link", "set", "lo", "up"},
		}
		for _, s := range steps {
			if err := run(ctx, s[0], s[1:]...); err != nil {
				return fail(err)
			}
		}
	}
	return l, nil
}

// Hosts returns the hosts in the order given to New.
func (l *Lab) Hosts() []*Host { return l.hosts }

// Host returns the host named name, or nil.
func (l *Lab) Host(name string) *Host {
	for _, h := range l.hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// Close removes every namespace of the lab (their interfaces go with them).
func (l *Lab) Close() { Sweep(l.prefix) }

// Sweep removes every namespace whose name starts with prefix + "-": what a
// lab made, also one whose process was killed before it could clean up.
func Sweep(prefix string) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			killIn(f[0])
			_ = exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
}

// OwnedPrefix is a prefix that names the calling process (tag and pid), so
// that concurrent labs do not collide and SweepOrphans can tell a dead
// lab's namespaces from a running one's.
func OwnedPrefix(tag string) string { return fmt.Sprintf("%s%d", tag, os.Getpid()) }

// SweepOrphans removes the namespaces of labs made with OwnedPrefix(tag)
// by processes that no longer run (killed before they could clean up).
func SweepOrphans(tag string) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		owner, _, ok := strings.Cut(f[0], "-")
		pid, err := strconv.Atoi(strings.TrimPrefix(owner, tag))
		if !ok || !strings.HasPrefix(owner, tag) || err != nil || pid <= 0 {
			continue
		}
		if unix.Kill(pid, 0) == unix.ESRCH {
			Sweep(owner)
		}
	}
}

// killIn kills the processes still running in namespace ns, so that its
// deletion does not leave them on a network with no way out.
func killIn(ns string) {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 && pid != os.Getpid() {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

func (l *Lab) hubRun(ctx context.Context, args ...string) error {
	return run(ctx, "ip", append([]string{"netns", "exec", l.hub}, args...)...)
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netns: %s %s: %s: %w", name, strings.Join(args, " "), bytes.TrimSpace(out), err)
	}
	return nil
}

// Command returns a command that runs inside the host's namespace.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// Nft loads an nftables rule set (nft -f syntax) into the host's namespace.
func (h *Host) Nft(ctx context.Context, ruleset string) error {
	cmd := h.Command(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netns: nft in %s: %s: %w", h.NS, bytes.TrimSpace(out), err)
	}
	return nil
}

// Do runs fn on an OS thread that has entered the host's namespace; the
// sockets fn creates belong to that namespace for their whole life.
func (h *Host) Do(fn func() error) (err error) {
	runtime.LockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: %w", err)
	}
	defer func() { _ = self.Close() }()
	target, err := os.Open("/var/run/netns/" + h.NS)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: %w", err)
	}
	defer func() { _ = target.Close() }()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread() // a failed setns leaves the thread where it was
		return fmt.Errorf("netns: enter %s: %w", h.NS, err)
	}
	// Restored however fn ends, a panic included.
	defer func() {
		if rerr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); rerr != nil {
			// The thread stays in the host's namespace: it stays locked
			// and ends with this goroutine.
			err = errors.Join(err, fmt.Errorf("netns: leave %s: %w", h.NS, rerr))
			return
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}

// Listen opens a TCP listener inside the host.
func (h *Host) Listen(network, addr string) (ln net.Listener, err error) {
	err = h.Do(func() error { ln, err = net.Listen(network, addr); return err })
	return ln, err
}

// ListenUDP opens a UDP socket inside the host.
func (h *Host) ListenUDP(addr *net.UDPAddr) (c *net.UDPConn, err error) {
	err = h.Do(func() error { c, err = net.ListenUDP("udp", addr); return err })
	return c, err
}

// DialUDP opens a connected UDP socket inside the host.
func (h *Host) DialUDP(raddr *net.UDPAddr) (c *net.UDPConn, err error) {
	err = h.Do(func() error { c, err = net.DialUDP("udp", nil, raddr); return err })
	return c, err
}

// DialContext connects from inside the host. The socket is created on the
// pinned thread; the connect itself may finish on any thread, as a
// socket's namespace is fixed when it is made.
func (h *Host) DialContext(ctx context.Context, network, addr string) (c net.Conn, err error) {
	err = h.Do(func() error {
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

func runOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}

func containsWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}
