package disk

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Held: makeDir follows a symlink to a directory and leaves it (and what
// it points at) alone; a symlink to a file outside the tier is removed,
// not the file it points at.
func TestS30DiskMakeDirLeavesSymlinkTargetsAlone(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "v1"), 0o700); err != nil {
		t.Fatal(err)
	}
	od := filepath.Join(outside, "shard")
	if err := os.MkdirAll(od, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(od, "keep"), []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	of := filepath.Join(outside, "file")
	if err := os.WriteFile(of, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(od, filepath.Join(dir, "v1", "7f")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(of, filepath.Join(dir, "v1", "80")); err != nil {
		t.Fatal(err)
	}
	tier, err := Open(Options{Dir: dir, MaxBytes: 1 << 20, DownFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	_ = tier.Close(context.Background())
	if b, err := os.ReadFile(filepath.Join(od, "keep")); err != nil || string(b) != "precious" {
		t.Fatalf("file in the symlinked directory: %q %v", b, err)
	}
	if b, err := os.ReadFile(of); err != nil || string(b) != "precious" {
		t.Fatalf("symlink target: %q %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "v1", "80")); err != nil || !fi.IsDir() {
		t.Fatalf("v1/80 is not a directory now: %v %v", fi, err)
	}
}

// Held: a second Open of a directory in use fails at the lock, before it
// makes or removes anything: a file in place of a shard directory (as a
// running node's operator might leave) is still there.
func TestS30DiskMakeDirNotReachedWithoutTheLock(t *testing.T) {
	dir := t.TempDir()
	first := open(t, dir, 1<<20, nil)
	_ = first
	shard := filepath.Join(dir, "v1", "7f")
	if err := os.Remove(shard); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shard, []byte("someone's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir, MaxBytes: 1 << 20}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open: %v", err)
	}
	if b, err := os.ReadFile(shard); err != nil || string(b) != "someone's" {
		t.Fatalf("the second Open touched %s: %q %v", shard, b, err)
	}
}

// A review found (now mended): makeDir removes a file in place of one of the tier's directories,
// but not a dangling symlink there (os.Stat fails, so it goes straight to
// MkdirAll, which fails with "file exists"): Open fails and node.New with
// it, so the restarted node serves nobody, not even from the origin — the
// outcome 3f097a4 set out to remove ("a file in place of one of the tier's
// directories is removed at start instead of stopping the node"). A
// dangling link is what a shard moved to another disk and symlinked back
// leaves once that disk is gone. Steps: create <disk>/v1/7f as a symlink to
// a path that does not exist; Open. Expected: Open succeeds (the link
// removed and the directory made, or the shard left unused). Actual:
// "disk: mkdir .../v1/7f: file exists".
func TestS30DiskDanglingSymlinkInPlaceOfAShardStopsOpen(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "v1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(t.TempDir(), "gone"), filepath.Join(dir, "v1", "7f")); err != nil {
		t.Fatal(err)
	}
	tier, err := Open(Options{Dir: dir, MaxBytes: 1 << 20, DownFor: time.Hour})
	if err != nil {
		t.Fatalf("Open refused a tier with a dangling link for a shard directory: %v", err)
	}
	_ = tier.Close(context.Background())
}

// s30OldEncode is encode as c6b97c9 (the first release of the format) and
// 75237df wrote it: the header built field by field from the layout, with
// no scheme in the metadata.
func s30OldEncode(r *Record) []byte {
	meta := encodeMeta(r, "")
	buf := make([]byte, headerSize, headerSize+len(meta)+len(r.Body))
	copy(buf, magic)
	if r.Stale {
		buf[4] = flagStale
	}
	binary.BigEndian.PutUint32(buf[8:], uint32(len(meta)))
	binary.BigEndian.PutUint32(buf[12:], crc32.Checksum(meta, castagnoli))
	binary.BigEndian.PutUint64(buf[16:], uint64(len(r.Body)))
	binary.BigEndian.PutUint32(buf[24:], crc32.Checksum(r.Body, castagnoli))
	return append(append(buf, meta...), r.Body...)
}

// Held: every header an earlier release wrote (encode has never set a
// reserved byte, and SetStale writes only bit 0 of byte 4) passes the
// stricter parseHeader: fresh, stale, soft-purged in place, with a body
// whose length needs all of its 8 bytes' low 4, and the files of an
// earlier release found by a scan are indexed, not discarded.
func TestS30DiskRecordsOfEarlierReleasesPassTheStricterHeader(t *testing.T) {
	big := rec("https://a/big", strings.Repeat("x", 1<<20+3))
	big.Header = http.Header{"X-Many": make([]string, 300)}
	stale := rec("https://a/stale", "s")
	stale.Stale = true
	for _, r := range []*Record{rec("https://a/fresh", "f"), stale, big} {
		for _, b := range [][]byte{s30OldEncode(r), encode(r, ""), encode(r, "4")} {
			if b[4]&^flagStale != 0 || b[5]|b[6]|b[7] != 0 || binary.BigEndian.Uint32(b[28:]) != 0 {
				t.Fatalf("%s: encode set a reserved byte: % x", r.Key, b[:32])
			}
			if _, err := decode(b); err != nil {
				t.Fatalf("%s: %v", r.Key, err)
			}
		}
	}
	// A directory as an earlier release left it (no snapshot: scanned).
	dir := t.TempDir()
	tier := open(t, dir, 4<<20, nil)
	_ = tier
	shardOf := func(key string) string { n := fileName(key, ""); return filepath.Join(dir, "v1", n[:2], n+".1") }
	for _, r := range []*Record{rec("https://a/fresh", "f"), stale} {
		if err := os.WriteFile(shardOf(r.Key), s30OldEncode(r), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := shardOf("https://a/fresh")
	if err := (osFS{}).SetStale(p); err != nil { // an earlier release's soft purge
		t.Fatal(err)
	}
	crash := t.TempDir()
	copyTree(t, dir, crash)
	again := open(t, crash, 4<<20, nil)
	if rc := again.Recovery(); rc.Objects != 2 || rc.Discarded != 0 {
		t.Fatalf("recovery of an earlier release's files: %+v", rc)
	}
	for _, k := range []string{"https://a/fresh", "https://a/stale"} {
		if r, _ := again.Lookup(k, noVary); r == nil || !r.Stale {
			t.Fatalf("%s: %+v", k, r)
		}
	}
}

// A review found (now mended): makeDir keeps a symlink to a directory in place of tmp (os.Stat
// follows it) and the start's scan then empties the directory it points
// at: recover removes every entry of <root>/tmp, through the link, as
// interrupted writes. Steps: <disk>/v1/tmp is a symlink to a directory
// outside the tier (an operator's scratch space, /var/tmp) holding a file;
// Open (no snapshot: a first start or after a crash). Expected: nothing
// outside the tier's directory is removed (the link refused, replaced, or
// not followed). Actual: the outside file is deleted and counted as an
// interrupted write (Recovery.TempFiles).
func TestS30DiskSymlinkedTmpLetsTheScanDeleteOutsideFiles(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "v1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "precious"), []byte("not the tier's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "v1", "tmp")); err != nil {
		t.Fatal(err)
	}
	tier, err := Open(Options{Dir: dir, MaxBytes: 1 << 20, DownFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rc := tier.Recovery()
	_ = tier.Close(context.Background())
	if _, err := os.Stat(filepath.Join(outside, "precious")); err != nil {
		t.Fatalf("a file outside the tier was removed at start (Recovery.TempFiles %d): %v", rc.TempFiles, err)
	}
}
