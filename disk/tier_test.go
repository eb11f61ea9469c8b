package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func rec(key, body string) *Record {
	return &Record{
		Key: key, Status: 200, Body: []byte(body),
		Header:      http.Header{"Content-Type": {"text/plain"}, "Etag": {`"` + body + `"`}},
		RequestTime: time.Unix(1700000000, 0), ResponseTime: time.Unix(1700000001, 0),
	}
}

func open(t *testing.T, dir string, max int64, fsys FS) *Tier {
	t.Helper()
	tier, err := Open(Options{Dir: dir, MaxBytes: max, FS: fsys, DownFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	return tier
}

// drain waits until every queued write has been stored or dropped.
func drain(t *testing.T, tier *Tier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tier.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func noVary([]string) string { return "" }

func get(tier *Tier, key string) string {
	r, _ := tier.Lookup(key, noVary)
	if r == nil {
		return ""
	}
	return string(r.Body)
}

func TestRoundTripAndRestart(t *testing.T) {
	dir := t.TempDir()
	tier := open(t, dir, 1<<20, nil)
	r := rec("https://a/x", "hello")
	r.Surrogates = []string{"t1"}
	r.VaryNames = nil
	tier.Write(r)
	drain(t, tier)
	got, hits := tier.Lookup("https://a/x", noVary)
	if got == nil || string(got.Body) != "hello" || hits != 1 || got.Header.Get("Etag") != `"hello"` || !got.ResponseTime.Equal(r.ResponseTime) {
		t.Fatalf("lookup = %+v, %d", got, hits)
	}
	if err := tier.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := open(t, dir, 1<<20, nil)
	if rc := again.Recovery(); rc.Objects != 1 || rc.Discarded != 0 || !rc.FromSnapshot {
		t.Fatalf("recovery = %+v", rc)
	}
	if get(again, "https://a/x") != "hello" {
		t.Fatal("object lost across a restart")
	}
	if keys := again.KeysWithTag("t1"); len(keys) != 1 {
		t.Fatalf("surrogate keys after restart: %v", keys)
	}
}

func TestVariants(t *testing.T) {
	tier := open(t, t.TempDir(), 1<<20, nil)
	for _, lang := range []string{"en", "fr"} {
		r := rec("https://a/v", "body-"+lang)
		r.VaryNames, r.VaryKey = []string{"accept-language"}, lang
		tier.Write(r)
	}
	drain(t, tier)
	for _, lang := range []string{"en", "fr"} {
		r, _ := tier.Lookup("https://a/v", func(names []string) string { return lang })
		if r == nil || string(r.Body) != "body-"+lang {
			t.Fatalf("%s variant: %+v", lang, r)
		}
	}
	if r, _ := tier.Lookup("https://a/v", func([]string) string { return "de" }); r != nil {
		t.Fatal("unstored variant served")
	}
	// A response with other Vary names replaces every variant.
	r := rec("https://a/v", "plain")
	tier.Write(r)
	drain(t, tier)
	if get(tier, "https://a/v") != "plain" || tier.Stats().Objects != 1 {
		t.Fatalf("vary change: %q, %d objects", get(tier, "https://a/v"), tier.Stats().Objects)
	}
}

func TestBudgetNeverExceeded(t *testing.T) {
	dir := t.TempDir()
	const max = 64 << 10
	tier := open(t, dir, max, nil)
	body := strings.Repeat("x", 4000)
	for i := range 100 {
		tier.Write(rec(fmt.Sprintf("https://a/%d", i), body))
		if i%10 == 0 {
			drain(t, tier)
			if st := tier.Stats(); st.Bytes > max || du(t, dir) > max {
				t.Fatalf("over budget: index %d, files %d", st.Bytes, du(t, dir))
			}
		}
	}
	drain(t, tier)
	st := tier.Stats()
	if st.Bytes > max || du(t, dir) > max || st.Evictions == 0 {
		t.Fatalf("stats %+v, files %d", st, du(t, dir))
	}
	// The oldest went first. (Four writers commit out of order, and one
	// that finds no room while others hold reservations drops its write,
	// counted: so the newest is there or its drop is counted.)
	if get(tier, "https://a/0") != "" {
		t.Fatal("the oldest object outlived 100 writes into a 16-object budget")
	}
	if get(tier, "https://a/99") != body && st.Dropped == 0 {
		t.Fatal("the newest object is missing and no write was dropped")
	}
}

func du(t *testing.T, dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// A purge that comes while a write is queued wins: the write is dropped.
func TestPurgeBeatsQueuedWrite(t *testing.T) {
	gate := &gatedFS{release: make(chan struct{})}
	tier := open(t, t.TempDir(), 1<<20, gate)
	tier.Write(rec("https://a/first", "1")) // holds the writer at the gate
	tier.Write(rec("https://a/p", "secret-v1"))
	if n := tier.Remove("https://a/p"); n != 0 {
		t.Fatalf("removed %d stored", n)
	}
	close(gate.release)
	drain(t, tier)
	if got := get(tier, "https://a/p"); got != "" {
		t.Fatalf("purged object written after its purge: %q", got)
	}
	// Soft purge of a queued write marks the stored record stale.
	tier.Write(rec("https://a/s", "s"))
	tier.MarkStale("https://a/s")
	drain(t, tier)
	if r, _ := tier.Lookup("https://a/s", noVary); r == nil || !r.Stale {
		t.Fatalf("soft purge lost: %+v", r)
	}
}

type gatedFS struct {
	osFS
	once    sync.Once
	release chan struct{}
}

func (g *gatedFS) Stage(dir string, b []byte) (Staged, error) {
	g.once.Do(func() { <-g.release })
	return g.osFS.Stage(dir, b)
}

func TestRecoveryDiscardsPartialAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	tier := open(t, dir, 1<<20, nil)
	for _, k := range []string{"good", "short", "flipped-meta", "flipped-body"} {
		tier.Write(rec("https://a/"+k, strings.Repeat(k, 50)))
	}
	drain(t, tier)
	_ = tier.Close(context.Background())
	// A crash leaves no index snapshot: the files are scanned.
	if err := os.Remove(filepath.Join(dir, "v1", "index.snap")); err != nil {
		t.Fatal(err)
	}
	path := func(k string) string {
		m, _ := filepath.Glob(filepath.Join(dir, "v1", "*", fileName("https://a/"+k, "")+".*"))
		if len(m) != 1 {
			t.Fatalf("%d files for %s", len(m), k)
		}
		return m[0]
	}
	b, _ := os.ReadFile(path("short"))
	_ = os.WriteFile(path("short"), b[:len(b)-7], 0o644) // a write cut short
	b, _ = os.ReadFile(path("flipped-meta"))
	b[headerSize+3] ^= 0x40
	_ = os.WriteFile(path("flipped-meta"), b, 0o644)
	b, _ = os.ReadFile(path("flipped-body"))
	b[len(b)-1] ^= 1
	_ = os.WriteFile(path("flipped-body"), b, 0o644)
	_ = os.WriteFile(filepath.Join(dir, "v1", "tmp", "abandoned"), []byte("half a write"), 0o644)

	again := open(t, dir, 1<<20, nil)
	rc := again.Recovery()
	if rc.Objects != 2 || rc.Discarded != 2 || rc.TempFiles != 1 {
		t.Fatalf("recovery = %+v", rc)
	}
	if get(again, "https://a/good") == "" {
		t.Fatal("good object lost")
	}
	// The body checksum is verified on read: the flipped body is never
	// served, and is gone afterwards.
	if got := get(again, "https://a/flipped-body"); got != "" {
		t.Fatalf("corrupt body served: %q", got)
	}
	if st := again.Stats(); st.Corrupt != 1 || again.Has("https://a/flipped-body") {
		t.Fatalf("corrupt body not discarded: %+v", st)
	}
}

// failingFS fails every operation once armed, as a dead or read-only disk.
type failingFS struct {
	osFS
	mu  sync.Mutex
	err error
}

func (f *failingFS) fail() error { f.mu.Lock(); defer f.mu.Unlock(); return f.err }
func (f *failingFS) Stage(dir string, b []byte) (Staged, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.osFS.Stage(dir, b)
}
func (f *failingFS) ReadFile(n string) ([]byte, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.osFS.ReadFile(n)
}

func TestFailingDiskGoesDownAndComesBack(t *testing.T) {
	fsys := &failingFS{}
	tier, err := Open(Options{Dir: t.TempDir(), MaxBytes: 1 << 20, FS: fsys, DownFor: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close(context.Background())
	tier.Write(rec("https://a/ok", "ok"))
	drain(t, tier)
	fsys.mu.Lock()
	fsys.err = errors.New("input/output error")
	fsys.mu.Unlock()
	if get(tier, "https://a/ok") != "" {
		t.Fatal("read through a failing disk")
	}
	for i := range 5 {
		tier.Write(rec(fmt.Sprintf("https://a/%d", i), "x"))
		drain(t, tier)
	}
	st := tier.Stats()
	if st.Up || st.WriteErrors < 2 || st.ReadErrors != 1 || st.LastError == "" {
		t.Fatalf("stats after failures: %+v", st)
	}
	if tier.Has("https://a/ok") {
		t.Fatal("unreadable object still indexed")
	}
	fsys.mu.Lock()
	fsys.err = nil
	fsys.mu.Unlock()
	time.Sleep(60 * time.Millisecond)
	tier.Write(rec("https://a/back", "back"))
	drain(t, tier)
	if !tier.Stats().Up || get(tier, "https://a/back") != "back" {
		t.Fatalf("tier did not come back: %+v", tier.Stats())
	}
}

func TestMalformedRecords(t *testing.T) {
	good := encode(rec("https://a/x", "body"), "")
	cases := map[string][]byte{
		"empty":         nil,
		"bad magic":     append([]byte("XXXX"), good[4:]...),
		"short":         good[:len(good)-1],
		"long":          append(bytes.Clone(good), 0),
		"huge meta":     func() []byte { b := bytes.Clone(good); b[8] = 0xff; return b }(),
		"body flipped":  func() []byte { b := bytes.Clone(good); b[len(b)-1] ^= 1; return b }(),
		"meta flipped":  func() []byte { b := bytes.Clone(good); b[headerSize] ^= 1; return b }(),
		"header only":   good[:headerSize],
		"negative body": func() []byte { b := bytes.Clone(good); b[16] = 0x80; return b }(),
	}
	for name, b := range cases {
		if _, err := decode(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
	metas := map[string][]byte{
		"truncated varint": {0x80},
		"string too long":  {0x05, 'a'},
		"list too long":    {0x00, 0x00, 0x7f},
		"trailing bytes":   append(encodeMeta(rec("k", ""), "s2"), 0),
		"empty scheme":     append(encodeMeta(rec("k", ""), ""), 0),
		"scheme too long":  append(encodeMeta(rec("k", ""), ""), 5, 's'),
		"bad status":       encodeMeta(&Record{Key: "k", Status: 42}, ""),
	}
	for name, b := range metas {
		if _, err := decodeMeta(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
	if r, err := decode(good); err != nil || string(r.Body) != "body" {
		t.Fatalf("good record: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(encode(rec("https://a/x", "body"), ""))
	f.Add(encode(rec("https://a/x", "body"), "vary2"))
	f.Add(encodeMeta(rec("k", ""), ""))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := decode(b); err == nil {
			// Whatever decodes must encode back to the same bytes
			// (header order aside, so compare by decoding again).
			r2, err := decode(encode(r, r.KeyScheme))
			if err != nil || r2.Key != r.Key || r2.KeyScheme != r.KeyScheme || !bytes.Equal(r2.Body, r.Body) {
				t.Fatalf("round trip: %v", err)
			}
		}
		_, _ = decodeMeta(b)
	})
}

// A snapshot is used once: a second start without a clean shutdown between
// scans, and a damaged snapshot falls back to the scan.
func TestSnapshotUsedOnceAndChecked(t *testing.T) {
	dir := t.TempDir()
	tier := open(t, dir, 1<<20, nil)
	for i := range 20 {
		r := rec(fmt.Sprintf("https://a/%d", i), strings.Repeat("b", i+1))
		r.Surrogates = []string{"all"}
		tier.Write(r)
	}
	drain(t, tier)
	tier.MarkStale("https://a/3")
	_ = tier.Close(context.Background())

	again := open(t, dir, 1<<20, nil)
	if rc := again.Recovery(); !rc.FromSnapshot || rc.Objects != 20 {
		t.Fatalf("snapshot start: %+v", rc)
	}
	if r, _ := again.Lookup("https://a/3", noVary); r == nil || !r.Stale {
		t.Fatal("stale flag lost across a snapshot restart")
	}
	if len(again.KeysWithTag("all")) != 20 {
		t.Fatal("surrogate keys lost across a snapshot restart")
	}
	if _, err := os.Stat(filepath.Join(dir, "v1", "index.snap")); !os.IsNotExist(err) {
		t.Fatal("snapshot still there after it was loaded")
	}
	// Crash (no Close): the next start scans.
	again.closed.Store(true)
	again.unlock()
	close(again.closeDone)
	third := open(t, dir, 1<<20, nil)
	if rc := third.Recovery(); rc.FromSnapshot || rc.Objects != 20 {
		t.Fatalf("start after a crash: %+v", rc)
	}
	_ = third.Close(context.Background())
	snap := filepath.Join(dir, "v1", "index.snap")
	b, _ := os.ReadFile(snap)
	b[10] ^= 1
	_ = os.WriteFile(snap, b, 0o600)
	fourth := open(t, dir, 1<<20, nil)
	if rc := fourth.Recovery(); rc.FromSnapshot || rc.Objects != 20 {
		t.Fatalf("start with a damaged snapshot: %+v", rc)
	}
}

func FuzzSnapshot(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{1, 0, 0})
	f.Add([]byte("EDGK\x01s\x00"))
	f.Add([]byte("EDGK\x09s"))
	f.Add([]byte("EDGI\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseSnapshot(b)
		if _, body, err := snapshotScheme(b); err == nil {
			_, _ = parseSnapshot(body)
		}
	})
}
